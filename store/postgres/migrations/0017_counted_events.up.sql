-- Norn schema version 17: a node whose Subscribe streams all only count
-- submissions, assignments and completions (EventFilter.Counts, as the
-- server's throughput history and metrics do) says so here. While every
-- live row says so, statements send those three kinds as one line per
-- queue and statement instead of one per task (docs/postgres.md,
-- Notifications). A row without it (older binaries write none) asks for
-- every event one by one, as before.
ALTER TABLE {{schema}}.event_subscribers ADD COLUMN counts_only boolean NOT NULL DEFAULT false;
