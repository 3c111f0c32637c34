-- Norn schema version 1. {{schema}} is replaced by the configured schema
-- (quoted), so several deployments can share one database.

CREATE TABLE {{schema}}.queues (
    name                   text PRIMARY KEY,
    paused                 boolean NOT NULL DEFAULT false,
    timeout_ns             bigint  NOT NULL,
    retry                  jsonb,
    max_attempts           integer NOT NULL DEFAULT 0,
    retention_completed_ns bigint  NOT NULL,
    retention_aborted_ns   bigint  NOT NULL,
    retention_cancelled_ns bigint  NOT NULL
);

CREATE TABLE {{schema}}.tasks (
    id            text PRIMARY KEY,
    queue         text NOT NULL,
    spec          bytea,
    priority      bigint NOT NULL DEFAULT 0,
    status        text NOT NULL CHECK (status IN ('scheduled','blocked','ready','running','completed','aborted','cancelled')),
    progress      double precision NOT NULL DEFAULT 0,
    labels        jsonb,
    created       timestamptz NOT NULL,
    updated       timestamptz NOT NULL,
    run_at        timestamptz NOT NULL,
    -- when the task last became ready: the claim order after priority
    ready_at      timestamptz NOT NULL,
    -- when the task became terminal: retention counts from here
    ended_at      timestamptz,
    depends_on    text[],
    -- dependencies not completed yet; the task is released when it reaches 0
    pending_deps  integer NOT NULL DEFAULT 0,
    owner         text,
    deadline      timestamptz,
    lease         bigint  NOT NULL DEFAULT 0,
    attempts      integer NOT NULL DEFAULT 0,
    max_attempts  integer NOT NULL DEFAULT 0,
    retry         jsonb,
    timeout_ns    bigint  NOT NULL,
    result        bytea,
    errors        jsonb,
    -- entries ever appended to task_history; the newest has seq = history_count
    history_count integer NOT NULL DEFAULT 0,
    -- the last log sequence number used
    log_seq       bigint  NOT NULL DEFAULT 0,
    version       bigint  NOT NULL DEFAULT 1
);

-- Claims: one index range scan per queue, ready tasks only, in claim order.
CREATE INDEX tasks_claim ON {{schema}}.tasks (queue, priority DESC, ready_at, id) WHERE status = 'ready';
-- Monitor: due delays and expired leases without scanning other tasks.
CREATE INDEX tasks_scheduled ON {{schema}}.tasks (run_at) WHERE status = 'scheduled';
CREATE INDEX tasks_running ON {{schema}}.tasks (deadline) WHERE status = 'running';
-- Retention purge, oldest terminal tasks first.
CREATE INDEX tasks_ended ON {{schema}}.tasks (status, ended_at) WHERE ended_at IS NOT NULL;
-- Counts by queue and status (queues view, stats).
CREATE INDEX tasks_queue_status ON {{schema}}.tasks (queue, status);
-- Dependency release and failure cascade: blocked tasks by what they wait for.
CREATE INDEX tasks_blocked_deps ON {{schema}}.tasks USING gin (depends_on) WHERE status = 'blocked';

-- History entries are rows of their own so a transition appends one row
-- instead of rewriting a growing array in the task.
CREATE TABLE {{schema}}.task_history (
    task_id  text    NOT NULL,
    seq      integer NOT NULL,
    type     text    NOT NULL,
    time     timestamptz NOT NULL,
    worker   text,
    lease    bigint,
    progress double precision,
    error    jsonb,
    PRIMARY KEY (task_id, seq)
);

CREATE TABLE {{schema}}.task_log (
    task_id text   NOT NULL,
    seq     bigint NOT NULL,
    lease   bigint NOT NULL,
    time    timestamptz NOT NULL,
    data    bytea,
    PRIMARY KEY (task_id, seq)
);

CREATE SEQUENCE {{schema}}.worker_seq;

CREATE TABLE {{schema}}.workers (
    n          bigint PRIMARY KEY,
    id         text NOT NULL UNIQUE,
    name       text,
    queues     text[],
    registered timestamptz NOT NULL,
    last_seen  timestamptz NOT NULL
);
