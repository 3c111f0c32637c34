DROP TABLE {{schema}}.ended_log;
CREATE OR REPLACE FUNCTION {{schema}}.sequence_moved() RETURNS trigger LANGUAGE plpgsql AS $$
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
DROP INDEX {{schema}}.tasks_blocked_deps, {{schema}}.tasks_claim, {{schema}}.tasks_ended, {{schema}}.tasks_fair,
    {{schema}}.tasks_key_ready, {{schema}}.tasks_running, {{schema}}.tasks_running_key, {{schema}}.tasks_scheduled,
    {{schema}}.tasks_unique_key, {{schema}}.tasks_expiry, {{schema}}.tasks_batch, {{schema}}.tasks_sequence_waiting,
    {{schema}}.tasks_unique_live;
ALTER TABLE {{schema}}.tasks DROP COLUMN ist, DROP COLUMN ended_idx, DROP COLUMN unique_ended;
ALTER TABLE {{schema}}.tasks RESET (fillfactor);
CREATE INDEX tasks_blocked_deps ON {{schema}}.tasks USING gin (depends_on) WITH (fastupdate = off) WHERE status = 'blocked';
CREATE INDEX tasks_claim ON {{schema}}.tasks (queue, priority DESC, ready_at, id) WHERE status = 'ready' AND ready_batch IS NULL;
CREATE INDEX tasks_ended ON {{schema}}.tasks (status, ended_at) WHERE ended_at IS NOT NULL;
CREATE INDEX tasks_fair ON {{schema}}.tasks (queue, fair_key, priority DESC, ready_at, id)
    WHERE status = 'ready' AND ready_batch IS NULL AND fair_key IS NOT NULL;
CREATE INDEX tasks_key_ready ON {{schema}}.tasks (queue, concurrency_key, priority DESC, ready_at, id)
    WHERE status = 'ready' AND concurrency_key IS NOT NULL;
CREATE INDEX tasks_running ON {{schema}}.tasks (deadline) WHERE status = 'running';
CREATE INDEX tasks_running_key ON {{schema}}.tasks (queue, running_key) WHERE status = 'running' AND running_key IS NOT NULL;
CREATE INDEX tasks_scheduled ON {{schema}}.tasks (run_at) WHERE status = 'scheduled';
CREATE INDEX tasks_unique_key ON {{schema}}.tasks (unique_key, queue, ended_at) WHERE unique_key IS NOT NULL;
-- Only the waiting tasks that have an expiry: the monitor finds the next
-- due without reading anything else.
CREATE INDEX tasks_expiry ON {{schema}}.tasks (expires_at)
    WHERE expires_at IS NOT NULL AND status IN ('scheduled', 'blocked', 'ready');
-- Only batch members, by status: a batch's counts and its "any member
-- pending?" probe read only its own.
CREATE INDEX tasks_batch ON {{schema}}.tasks (batch, status) WHERE batch IS NOT NULL;
-- A sequence's waiting members in order.
CREATE INDEX tasks_sequence_waiting ON {{schema}}.tasks (queue, sequence_key, sequence_no)
    WHERE status = 'blocked' AND sequence_key IS NOT NULL;
CREATE UNIQUE INDEX tasks_unique_live ON {{schema}}.tasks (queue, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('scheduled','blocked','ready','running');
