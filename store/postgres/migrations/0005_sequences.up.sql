-- Sequences: a task's sequence key and its number in the sequence (submit
-- order); the waiting members are found in order by the partial index.
ALTER TABLE {{schema}}.tasks ADD COLUMN sequence_key text COLLATE "C";
ALTER TABLE {{schema}}.tasks ADD COLUMN sequence_no bigint;
CREATE INDEX tasks_sequence_waiting ON {{schema}}.tasks (queue, sequence_key, sequence_no)
    WHERE status = 'blocked' AND sequence_key IS NOT NULL;
ALTER TABLE {{schema}}.queues ADD COLUMN sequence_on_failure text NOT NULL DEFAULT '';

-- The dependency indexes write straight into the index, without GIN's
-- pending list: every completion's release probe (depends_on && the
-- completed ids) would otherwise read the whole list, once per id, and
-- waiting sequence members and dependents fill it (19,000 blocked tasks
-- made a probe of 1,000 ids take 250 ms instead of a millisecond).
ALTER INDEX {{schema}}.tasks_blocked_deps SET (fastupdate = off);
ALTER INDEX {{schema}}.tasks_depends_on SET (fastupdate = off);
SELECT gin_clean_pending_list('{{schema}}.tasks_blocked_deps'::regclass), gin_clean_pending_list('{{schema}}.tasks_depends_on'::regclass);

-- One row per sequence: the head (the one member that may be scheduled,
-- ready or running; an aborted one while halted), and the next number.
-- Submits lock the row, so members are numbered in the order they commit.
CREATE TABLE {{schema}}.sequences (
    queue   text COLLATE "C" NOT NULL,
    key     text COLLATE "C" NOT NULL,
    head    text COLLATE "C",
    halted  boolean NOT NULL DEFAULT false,
    next_no bigint  NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, key)
);

-- The hand-over runs in a trigger, in the transaction that ends the head,
-- whatever path ends it (completion, failure, cancel, timeout, expiry, a
-- cascade, a deletion or the retention purge): none of them needs to know
-- about sequences, and tasks without a sequence key pay only the WHEN test.
CREATE FUNCTION {{schema}}.sequence_moved() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t        {{schema}}.tasks;
    seq      {{schema}}.sequences;
    ended    boolean := false;
    back     boolean := false;
    at       timestamptz;
    nid      text;
    nst      text;
    nver     bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        t := OLD;
        ended := true;
        -- A deletion carries no time of its own: the database's clock, or
        -- the head's last change when that is later (a node's clock ahead).
        at := greatest(clock_timestamp(), OLD.updated);
    ELSE
        t := NEW;
        ended := NEW.status IN ('completed', 'aborted', 'cancelled') AND OLD.status NOT IN ('completed', 'aborted', 'cancelled');
        back := OLD.status IN ('completed', 'aborted', 'cancelled') AND NEW.status NOT IN ('completed', 'aborted', 'cancelled');
        at := NEW.updated;
    END IF;
    -- A waiting member (blocked without dependencies: a head blocked on
    -- children it awaits has some) that leaves changes nothing. It is told
    -- from the head without reading, let alone locking, the sequence: a
    -- hand-over holds that row while it waits for this member's row lock.
    IF NOT (ended OR back) OR (ended AND OLD.status = 'blocked' AND OLD.depends_on IS NULL) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO seq FROM {{schema}}.sequences s WHERE s.queue = t.queue AND s.key = t.sequence_key FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF back THEN
        -- A halted head retried goes on as the head; a member retried while
        -- the sequence has none becomes it (a retry beside a live head is
        -- refused before it gets here).
        IF seq.head = t.id OR seq.head IS NULL THEN
            UPDATE {{schema}}.sequences s SET head = t.id, halted = false WHERE s.queue = seq.queue AND s.key = seq.key;
        END IF;
        RETURN NULL;
    END IF;
    IF seq.head IS DISTINCT FROM t.id THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'UPDATE' AND t.status = 'aborted' AND coalesce((SELECT q.sequence_on_failure FROM {{schema}}.queues q
            WHERE q.name = t.queue), '') <> 'continue' THEN
        UPDATE {{schema}}.sequences s SET halted = true WHERE s.queue = seq.queue AND s.key = seq.key;
        RETURN NULL;
    END IF;
    -- The first waiting member, locked. Every waiting member was numbered
    -- after the head (a member waits only behind a head, and a head is the
    -- lowest waiting member, a new one, or one retried when none waited),
    -- so the index scan starts past the head's number: the entries of the
    -- members already handed over, dead until a vacuum, are not walked
    -- again at every hand-over. A member that ended while this waited for
    -- its lock is skipped by FOR UPDATE without a row taking its place
    -- (LIMIT was applied first): look again until one is found or none
    -- waits.
    LOOP
        SELECT w.id INTO nid FROM {{schema}}.tasks w
            WHERE w.queue = t.queue AND w.sequence_key = t.sequence_key AND w.status = 'blocked'
            AND w.sequence_no > t.sequence_no
            ORDER BY w.sequence_no LIMIT 1 FOR UPDATE;
        EXIT WHEN nid IS NOT NULL OR NOT EXISTS (SELECT 1 FROM {{schema}}.tasks w
            WHERE w.queue = t.queue AND w.sequence_key = t.sequence_key AND w.status = 'blocked'
            AND w.sequence_no > t.sequence_no);
    END LOOP;
    IF nid IS NULL THEN
        UPDATE {{schema}}.sequences s SET head = NULL, halted = false WHERE s.queue = seq.queue AND s.key = seq.key;
        RETURN NULL;
    END IF;
    -- The member released, its history entry and the new head in one
    -- statement, then one notification (a line while someone subscribes,
    -- else the wake-up claimers and the monitor listen for).
    WITH u AS (UPDATE {{schema}}.tasks w SET status = CASE WHEN w.run_at > at THEN 'scheduled' ELSE 'ready' END,
            ready_at = at, updated = at, version = w.version + 1, history_count = w.history_count + 1
            WHERE w.id = nid RETURNING w.status, w.version, w.history_count),
        h AS (INSERT INTO {{schema}}.task_history_rows (task_id, seq, type, time) SELECT nid, u.history_count, 'TaskRelease', at FROM u),
        s AS (UPDATE {{schema}}.sequences s SET head = nid, halted = false WHERE s.queue = seq.queue AND s.key = seq.key)
    SELECT u.status, u.version INTO nst, nver FROM u;
    PERFORM pg_notify('norn:' || TG_TABLE_SCHEMA, CASE
        WHEN EXISTS (SELECT 1 FROM {{schema}}.event_subscribers e WHERE e.until > clock_timestamp())
        THEN 'TaskRelease' || chr(9) || nid || chr(9) || t.queue || chr(9) || nst || chr(9) || nver::text
            || chr(9) || (extract(epoch FROM at) * 1000000)::bigint::text
        WHEN nst = 'ready' THEN 'wake' ELSE 'sched' END);
    RETURN NULL;
END
$$;

-- The WHEN clauses let only a member that ends (other than a waiting one,
-- which changes nothing) or comes back call the function: a claim, a
-- release or a heartbeat of a member costs the tests, not a call.
CREATE TRIGGER tasks_sequence_update AFTER UPDATE OF status ON {{schema}}.tasks
    FOR EACH ROW WHEN (OLD.sequence_key IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
        AND ((NEW.status IN ('completed', 'aborted', 'cancelled') AND NOT (OLD.status = 'blocked' AND OLD.depends_on IS NULL))
            OR OLD.status IN ('completed', 'aborted', 'cancelled')))
    EXECUTE FUNCTION {{schema}}.sequence_moved();
CREATE TRIGGER tasks_sequence_delete AFTER DELETE ON {{schema}}.tasks
    FOR EACH ROW WHEN (OLD.sequence_key IS NOT NULL AND NOT (OLD.status = 'blocked' AND OLD.depends_on IS NULL))
    EXECUTE FUNCTION {{schema}}.sequence_moved();
