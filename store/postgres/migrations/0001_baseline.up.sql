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
    rate_burst             integer NOT NULL DEFAULT 0,
    -- a default expire_in for tasks that give none (0: none)
    expire_in_ns           bigint  NOT NULL DEFAULT 0,
    -- what a sequence does when a member aborts ('' halts, 'continue')
    sequence_on_failure    text    NOT NULL DEFAULT '',
    -- every concurrency key's own token bucket (a key's own rate_* in
    -- queue_keys overrides it); key_rated is set when either applies: such
    -- a queue is flow_limited and claimed on the exclusive path, which
    -- reads and writes key_buckets under the queue's gate
    key_rate_per_second    double precision NOT NULL DEFAULT 0,
    key_rate_burst         integer NOT NULL DEFAULT 0,
    key_rated              boolean NOT NULL DEFAULT false
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
    ready_batch     bigint,
    -- past it, a task not running ends aborted (expired)
    expires_at      timestamptz,
    -- the batch the task joined
    batch           text,
    -- a dependent's policy when a dependency fails (true: run once every
    -- dependency ended), and the outcomes of its dependencies that ended,
    -- an object by dependency id: {"status", "result" (base64), "error"}
    dep_run         boolean NOT NULL DEFAULT false,
    dep_results     jsonb,
    -- how many signals the task received (a claim reads the signals table
    -- only for tasks that have some) and its last wait for one
    -- ({"name", "until", "received"})
    signal_count    integer NOT NULL DEFAULT 0,
    signal_wait     jsonb,
    -- the sequence the task belongs to and its number in it (submit order)
    sequence_key    text COLLATE "C",
    sequence_no     bigint,
    -- The status as the indexes see it. No index names a column that a
    -- completion from a ready row changes (status, ready_batch, ended_at),
    -- so that completion is a HOT update: the new version on the task's
    -- page (the fillfactor leaves the room) and no index entry. ist is the
    -- status, but 'batched' for a task in a ready row or a lease, and NULL
    -- for a plain task (none of the four columns below set) there or
    -- completed, which no status index holds either way. Retention finds a
    -- plain completed task through ended_log (ended_idx is NULL for it).
    ist             text GENERATED ALWAYS AS (CASE
        WHEN (status = 'completed' OR (status = 'ready' AND ready_batch IS NOT NULL)) AND concurrency_key IS NULL
            AND expires_at IS NULL AND unique_key IS NULL AND batch IS NULL THEN NULL
        WHEN status = 'ready' AND ready_batch IS NOT NULL THEN 'batched'
        ELSE status END) STORED,
    ended_idx       timestamptz GENERATED ALWAYS AS (CASE
        WHEN status = 'completed' AND concurrency_key IS NULL AND expires_at IS NULL AND unique_key IS NULL
            AND batch IS NULL THEN NULL
        ELSE ended_at END) STORED,
    unique_ended    timestamptz GENERATED ALWAYS AS (CASE WHEN unique_key IS NOT NULL THEN ended_at END) STORED
) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02,
        autovacuum_vacuum_insert_scale_factor = 0.05, fillfactor = 50);

-- The dependency indexes write straight into the index, without GIN's
-- pending list: every completion's release probe (depends_on && the
-- completed ids) would otherwise read the whole list, once per id, and
-- waiting sequence members and dependents fill it (19,000 blocked tasks
-- made a probe of 1,000 ids take 250 ms instead of a millisecond).
CREATE INDEX tasks_blocked_deps ON {{schema}}.tasks USING gin (depends_on) WITH (fastupdate = off) WHERE ist = 'blocked';
CREATE INDEX tasks_claim ON {{schema}}.tasks (queue, priority DESC, ready_at, id) WHERE ist = 'ready';
CREATE INDEX tasks_depends_on ON {{schema}}.tasks USING gin (depends_on) WITH (fastupdate = off) WHERE depends_on IS NOT NULL;
CREATE INDEX tasks_ended ON {{schema}}.tasks (ist, ended_idx) WHERE ended_idx IS NOT NULL;
CREATE INDEX tasks_fair ON {{schema}}.tasks (queue, fair_key, priority DESC, ready_at, id)
    WHERE ist = 'ready' AND fair_key IS NOT NULL;
CREATE INDEX tasks_key_ready ON {{schema}}.tasks (queue, concurrency_key, priority DESC, ready_at, id)
    WHERE ist IN ('ready', 'batched') AND concurrency_key IS NOT NULL;
CREATE INDEX tasks_running ON {{schema}}.tasks (deadline) WHERE ist = 'running';
CREATE INDEX tasks_running_key ON {{schema}}.tasks (queue, running_key) WHERE ist = 'running' AND running_key IS NOT NULL;
CREATE INDEX tasks_scheduled ON {{schema}}.tasks (run_at) WHERE ist = 'scheduled';
CREATE INDEX tasks_unique_key ON {{schema}}.tasks (unique_key, queue, unique_ended) WHERE unique_key IS NOT NULL;
-- Only the waiting tasks that have an expiry: the monitor finds the next
-- due without reading anything else.
CREATE INDEX tasks_expiry ON {{schema}}.tasks (expires_at)
    WHERE expires_at IS NOT NULL AND ist IN ('scheduled', 'blocked', 'ready', 'batched');
-- Only batch members, by status ('batched' counts as ready): a batch's
-- counts and its "any member pending?" probe read only its own.
CREATE INDEX tasks_batch ON {{schema}}.tasks (batch, ist) WHERE batch IS NOT NULL;
-- A sequence's waiting members in order.
CREATE INDEX tasks_sequence_waiting ON {{schema}}.tasks (queue, sequence_key, sequence_no)
    WHERE ist = 'blocked' AND sequence_key IS NOT NULL;
CREATE UNIQUE INDEX tasks_unique_live ON {{schema}}.tasks (queue, unique_key)
    WHERE unique_key IS NOT NULL AND ist IN ('scheduled', 'blocked', 'ready', 'batched', 'running');

-- Plain tasks completed together, one row a queue for each statement that
-- completes some (the complete fast path, the compare-and-set, an import):
-- where retention finds them, as no index on tasks holds them.
CREATE TABLE {{schema}}.ended_log (
    id       bigserial PRIMARY KEY,
    queue    text COLLATE "C" NOT NULL,
    ended_at timestamptz NOT NULL,
    ids      text[] NOT NULL
);
CREATE INDEX ended_log_ended ON {{schema}}.ended_log (ended_at);

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
    last_seen  timestamptz NOT NULL,
    -- who registered the worker (a key derived from the calling token):
    -- only that token may claim and make lease calls as it
    registrar  text
);

CREATE TABLE {{schema}}.schedules (
    name      text PRIMARY KEY,
    doc       json NOT NULL,
    next_fire timestamptz,
    paused    boolean NOT NULL DEFAULT false
);
CREATE INDEX schedules_due ON {{schema}}.schedules (next_fire) WHERE NOT paused;

-- Per-key settings of a queue: a key's own limit, fair weight and rate.
CREATE TABLE {{schema}}.queue_keys (
    queue  text COLLATE "C" NOT NULL,
    key    text COLLATE "C" NOT NULL,
    lim    integer NOT NULL DEFAULT 0,
    weight integer NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, key),
    rate_per_second double precision NOT NULL DEFAULT 0,
    rate_burst      integer NOT NULL DEFAULT 0
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

-- Throughput history shared by every node: per queue ('' for all queues
-- together), per step (60 seconds or 3600) and per step start, the counts
-- a server counted from the store's events. Nodes write closed minutes
-- keeping the larger of each count; old minutes are summed into hours.
CREATE TABLE {{schema}}.throughput (
    queue     text        NOT NULL,
    step      integer     NOT NULL CHECK (step IN (60, 3600)),
    at        timestamptz NOT NULL,
    submitted bigint      NOT NULL DEFAULT 0,
    completed bigint      NOT NULL DEFAULT 0,
    failed    bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, step, at)
);

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

-- Signals a task received, numbered per task.
CREATE TABLE {{schema}}.signals (
    task_id text COLLATE "C" NOT NULL,
    seq     integer NOT NULL,
    name    text NOT NULL,
    data    bytea,
    "time"  timestamptz NOT NULL,
    PRIMARY KEY (task_id, seq)
);

-- Each concurrency key's token bucket where key rate limits apply (no
-- row: full).
CREATE TABLE {{schema}}.key_buckets (
    queue  text COLLATE "C" NOT NULL,
    key    text COLLATE "C" NOT NULL,
    tokens double precision NOT NULL,
    at     timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);

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
            WHERE w.queue = t.queue AND w.sequence_key = t.sequence_key AND w.ist = 'blocked'
            AND w.sequence_no > t.sequence_no
            ORDER BY w.sequence_no LIMIT 1 FOR UPDATE;
        EXIT WHEN nid IS NOT NULL OR NOT EXISTS (SELECT 1 FROM {{schema}}.tasks w
            WHERE w.queue = t.queue AND w.sequence_key = t.sequence_key AND w.ist = 'blocked'
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
