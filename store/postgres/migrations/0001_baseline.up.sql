-- Norn's schema. {{schema}} is replaced by the configured schema (quoted),
-- so several deployments can share one database. This is the baseline of
-- the first release; every later change is a new numbered migration.
-- Columns that hot statements touch are collated "C": byte order, no locale
-- lookups in index comparisons.

CREATE TABLE {{schema}}.queues (
    name                   text PRIMARY KEY,
    paused                 boolean NOT NULL DEFAULT false,
    timeout_ns             bigint  NOT NULL,
    retry                  jsonb,
    max_attempts           integer NOT NULL DEFAULT 0,
    retention_completed_ns bigint  NOT NULL,
    retention_aborted_ns   bigint  NOT NULL,
    retention_cancelled_ns bigint  NOT NULL,
    max_runtime_ns         bigint  NOT NULL DEFAULT 0,
    max_running            integer NOT NULL DEFAULT 0,
    key_limit              integer NOT NULL DEFAULT 0,
    -- set when any flow setting (counts, fairness, rate) is: plain claims
    -- skip such a queue, the flow paths take it
    flow_limited           boolean NOT NULL DEFAULT false,
    fair_by                text    NOT NULL DEFAULT '',
    -- the fair queue's virtual time
    fair_now               bigint  NOT NULL DEFAULT 0,
    rate_per_second        double precision NOT NULL DEFAULT 0,
    rate_burst             integer NOT NULL DEFAULT 0
);

CREATE TABLE {{schema}}.tasks (
    id              text COLLATE "C" PRIMARY KEY,
    queue           text COLLATE "C" NOT NULL,
    spec            bytea,
    priority        bigint NOT NULL DEFAULT 0,
    status          text NOT NULL CHECK (status IN ('scheduled','blocked','ready','running','completed','aborted','cancelled')),
    progress        double precision NOT NULL DEFAULT 0,
    labels          jsonb,
    created         timestamptz NOT NULL,
    updated         timestamptz NOT NULL,
    run_at          timestamptz NOT NULL,
    -- when the task last became ready: the claim order after priority
    ready_at        timestamptz NOT NULL,
    -- when the task became terminal: retention counts from here
    ended_at        timestamptz,
    depends_on      text[],
    pending_deps    integer NOT NULL DEFAULT 0,
    owner           text,
    deadline        timestamptz,
    lease           bigint  NOT NULL DEFAULT 0,
    attempts        integer NOT NULL DEFAULT 0,
    max_attempts    integer NOT NULL DEFAULT 0,
    retry           jsonb,
    timeout_ns      bigint  NOT NULL,
    result          bytea,
    errors          jsonb,
    history_count   integer NOT NULL DEFAULT 0,
    log_seq         bigint  NOT NULL DEFAULT 0,
    version         bigint  NOT NULL DEFAULT 1,
    -- the last assignment and the completion are history entries kept in
    -- the row (task_history shows them): a claim and a completion write no
    -- history row
    assign_seq      integer NOT NULL DEFAULT 0,
    claimed_at      timestamptz,
    done_seq        integer NOT NULL DEFAULT 0,
    concurrency_key text COLLATE "C",
    max_runtime_ns  bigint  NOT NULL DEFAULT 0,
    unique_key      text COLLATE "C",
    traceparent     text,
    tracestate      text,
    fair_key        text COLLATE "C",
    -- the key of a task running on the keyed or exclusive path
    running_key     text COLLATE "C",
    -- the ready row the task is in (NULL: an ordinary ready row)
    ready_batch     bigint
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02,
        autovacuum_vacuum_insert_scale_factor = 0.05);

CREATE INDEX tasks_blocked_deps ON {{schema}}.tasks USING gin (depends_on) WHERE status = 'blocked';
CREATE INDEX tasks_claim ON {{schema}}.tasks (queue, priority DESC, ready_at, id) WHERE status = 'ready' AND ready_batch IS NULL;
CREATE INDEX tasks_depends_on ON {{schema}}.tasks USING gin (depends_on) WHERE depends_on IS NOT NULL;
CREATE INDEX tasks_ended ON {{schema}}.tasks (status, ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX tasks_fair ON {{schema}}.tasks (queue, fair_key, priority DESC, ready_at, id)
    WHERE status = 'ready' AND ready_batch IS NULL AND fair_key IS NOT NULL;
CREATE INDEX tasks_key_ready ON {{schema}}.tasks (queue, concurrency_key, priority DESC, ready_at, id)
    WHERE status = 'ready' AND concurrency_key IS NOT NULL;
CREATE INDEX tasks_running ON {{schema}}.tasks (deadline) WHERE status = 'running';
CREATE INDEX tasks_running_key ON {{schema}}.tasks (queue, running_key) WHERE status = 'running' AND running_key IS NOT NULL;
CREATE INDEX tasks_scheduled ON {{schema}}.tasks (run_at) WHERE status = 'scheduled';
CREATE INDEX tasks_unique_key ON {{schema}}.tasks (unique_key, queue, ended_at) WHERE unique_key IS NOT NULL;
CREATE UNIQUE INDEX tasks_unique_live ON {{schema}}.tasks (queue, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('scheduled','blocked','ready','running');

-- History entries other than the ones kept in the task's row.
CREATE TABLE {{schema}}.task_history_rows (
    task_id  text COLLATE "C" NOT NULL,
    seq      integer NOT NULL,
    type     text NOT NULL,
    "time"   timestamptz NOT NULL,
    worker   text,
    lease    bigint,
    progress double precision,
    error    jsonb,
    CONSTRAINT task_history_pkey PRIMARY KEY (task_id, seq)
) WITH (autovacuum_vacuum_scale_factor = 0.05);

-- A task's whole history: its rows and the entries kept in its row.
CREATE VIEW {{schema}}.task_history AS
    SELECT task_id, seq, type, "time", worker, lease, progress, error FROM {{schema}}.task_history_rows
    UNION ALL
    SELECT id AS task_id, assign_seq AS seq, 'TaskAssignment'::text AS type, claimed_at AS "time", owner AS worker,
           lease, NULL::double precision AS progress, NULL::jsonb AS error
    FROM {{schema}}.tasks WHERE assign_seq > 0
    UNION ALL
    SELECT id AS task_id, done_seq AS seq, 'TaskComplete'::text AS type, ended_at AS "time", owner AS worker,
           lease, 1 AS progress, NULL::jsonb AS error
    FROM {{schema}}.tasks WHERE done_seq > 0;

CREATE TABLE {{schema}}.task_log (
    task_id text COLLATE "C" NOT NULL,
    seq     bigint NOT NULL,
    lease   bigint NOT NULL,
    "time"  timestamptz NOT NULL,
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

CREATE TABLE {{schema}}.schedules (
    name      text PRIMARY KEY,
    doc       json NOT NULL,
    next_fire timestamptz,
    paused    boolean NOT NULL DEFAULT false
);
CREATE INDEX schedules_due ON {{schema}}.schedules (next_fire) WHERE NOT paused;

-- Per-key settings of a queue: a key's own limit and fair weight.
CREATE TABLE {{schema}}.queue_keys (
    queue  text COLLATE "C" NOT NULL,
    key    text COLLATE "C" NOT NULL,
    lim    integer NOT NULL DEFAULT 0,
    weight integer NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, key)
);

-- Each fair key's virtual time.
CREATE TABLE {{schema}}.queue_fair (
    queue text COLLATE "C" NOT NULL,
    key   text COLLATE "C" NOT NULL,
    vt    bigint NOT NULL,
    PRIMARY KEY (queue, key)
);

-- A rate-limited queue's token bucket (no row: full).
CREATE TABLE {{schema}}.queue_buckets (
    queue  text COLLATE "C" PRIMARY KEY,
    tokens double precision NOT NULL,
    at     timestamptz NOT NULL
);

-- The shared flow path's slots: what each slot's claims admitted, and the
-- last count of running tasks one of them made (docs/internals/postgres-claims.md).
CREATE TABLE {{schema}}.queue_flow_slots (
    queue         text COLLATE "C" NOT NULL,
    slot          integer NOT NULL,
    admitted      bigint NOT NULL,
    cert_ver      text,
    cert_running  bigint,
    cert_admitted bigint,
    PRIMARY KEY (queue, slot)
);

-- Nodes with event subscribers, and whether they need only counts.
CREATE TABLE {{schema}}.event_subscribers (
    node        text PRIMARY KEY,
    until       timestamptz NOT NULL,
    counts_only boolean NOT NULL DEFAULT false
);

-- Ready rows: a submit's ready tasks of one queue and priority, claimed
-- together without writing the tasks' rows until they settle.
CREATE SEQUENCE {{schema}}.ready_seq INCREMENT BY 1024;
CREATE TABLE {{schema}}.ready (
    rid      bigint PRIMARY KEY,
    queue    text COLLATE "C" NOT NULL,
    priority bigint NOT NULL,
    ready_at timestamptz NOT NULL,
    first_id text COLLATE "C" NOT NULL,
    ids      text[] COLLATE "C" NOT NULL,
    keys     text[] COLLATE "C"
);
CREATE INDEX ready_claim ON {{schema}}.ready (queue, priority DESC, ready_at, first_id);

-- Leases: the tasks one claim took from ready rows, until each settles.
CREATE TABLE {{schema}}.leases (
    id         bigserial PRIMARY KEY,
    queue      text COLLATE "C" NOT NULL,
    worker     text NOT NULL,
    created    timestamptz NOT NULL,
    timeout_ns bigint,
    deadline   timestamptz NOT NULL,
    done       integer NOT NULL DEFAULT 0,
    ids        text[] COLLATE "C" NOT NULL,
    batches    bigint[] NOT NULL,
    keys       text[] COLLATE "C",
    kmax       integer
);
CREATE INDEX leases_batches ON {{schema}}.leases USING gin (batches);
CREATE INDEX leases_deadline ON {{schema}}.leases (deadline);
CREATE INDEX leases_queue ON {{schema}}.leases (queue);
CREATE INDEX leases_worker ON {{schema}}.leases (worker);
