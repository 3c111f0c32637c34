-- Batches: the batch as one JSON document, plus its state and whether its
-- callbacks may still fire ("waiting": sealed and not done, or done with an
-- on_success not yet fired) as columns for the monitor's index.
CREATE TABLE {{schema}}.batches (
    id      text        PRIMARY KEY,
    state   text        NOT NULL CHECK (state IN ('open', 'sealed', 'done')),
    waiting boolean     NOT NULL DEFAULT false,
    created timestamptz NOT NULL,
    labels  jsonb,
    doc     jsonb       NOT NULL
);
CREATE INDEX batches_waiting ON {{schema}}.batches (id) WHERE waiting;

-- The batch a task joined. The index holds only members, by status, so a
-- batch's counts and its "any member pending?" probe read only its own.
ALTER TABLE {{schema}}.tasks ADD COLUMN batch text;
CREATE INDEX tasks_batch ON {{schema}}.tasks (batch, status) WHERE batch IS NOT NULL;

-- A dependent's policy when a dependency fails (true: run once every
-- dependency ended), and the outcomes of its dependencies that ended, as
-- an object by dependency id: {"status", "result" (base64), "error"}.
ALTER TABLE {{schema}}.tasks ADD COLUMN dep_run boolean NOT NULL DEFAULT false;
ALTER TABLE {{schema}}.tasks ADD COLUMN dep_results jsonb;

-- Signals a task received, numbered per task; a task's count of them (so
-- a claim reads the table only for tasks that have some) and its last
-- wait for one ({"name", "until", "received"}).
CREATE TABLE {{schema}}.signals (
    task_id text COLLATE "C" NOT NULL,
    seq     integer NOT NULL,
    name    text NOT NULL,
    data    bytea,
    "time"  timestamptz NOT NULL,
    PRIMARY KEY (task_id, seq)
);
ALTER TABLE {{schema}}.tasks ADD COLUMN signal_count integer NOT NULL DEFAULT 0;
ALTER TABLE {{schema}}.tasks ADD COLUMN signal_wait jsonb;
