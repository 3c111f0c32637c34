package main

import "testing"

// TestClassify runs the classifier on the statements as pg_stat_statements
// shows them (constants as parameters): Norn's, taken from a run of its
// store, and River's, from its driver (riverpgxv5), with their layout.
func TestClassify(t *testing.T) {
	for _, c := range []struct{ name, query, want string }{
		{"norn: the submit's COPY",
			`COPY "norn"."tasks" (id, queue, spec, priority, status, labels, created, updated, run_at, ready_at, max_attempts, retry, timeout_ns, concurrency_key, max_runtime_ns, traceparent, tracestate, fair_key, ready_batch, expires_at) FROM STDIN BINARY`,
			kindSubmit},
		{"norn: the submit's ready rows",
			`WITH x AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::timestamptz[], $5::text[], $6::text[]) AS x(rid, queue, priority, ready_at, ids, keys)), ok AS (SELECT x.* FROM x WHERE NOT EXISTS (SELECT $7 FROM "norn".queues q WHERE q.name = x.queue AND q.fair_by <> $8)), ins AS (INSERT INTO "norn".ready (rid, queue, priority, ready_at, first_id, ids, keys) SELECT rid, queue, priority, ready_at, split_part(ids, $9, $10), string_to_array(ids, $11), CASE WHEN keys IS NOT NULL THEN ARRAY(SELECT jsonb_array_elements_text(keys::jsonb)) END FROM ok) SELECT x.ids FROM x WHERE x.rid NOT IN (SELECT rid FROM ok)`,
			kindSubmit},
		{"norn: the lease claim",
			`WITH n AS (SELECT coalesce($3::timestamptz, clock_timestamp()) AS now, $8::text AS ready), c AS (SELECT t.id, t.priority, t.ready_at FROM "norn".tasks t WHERE t.status = $9 AND t.ready_batch IS NULL AND t.queue = $1 AND NOT EXISTS (SELECT $10 FROM "norn".queues q WHERE q.name = $1 AND (q.paused OR q.flow_limited)) ORDER BY t.priority DESC, t.ready_at, t.id LIMIT $2 FOR UPDATE SKIP LOCKED), r AS (SELECT b.rid, b.priority, b.ready_at, b.first_id, b.ids, b.keys FROM "norn".ready b WHERE b.queue = $1 AND NOT EXISTS (SELECT $11 FROM "norn".queues q WHERE q.name = $1 AND (q.paused OR q.flow_limited)) ORDER BY b.priority DESC, b.ready_at, b.first_id LIMIT $7 FOR UPDATE SKIP LOCKED), rw AS (SELECT r.rid, r.priority, r.ready_at, r.ids, coalesce(sum(cardinality(r.ids)) OVER (ORDER BY r.priority DESC, r.ready_at, r.first_id ROWS BETWEEN UNBOUNDED PRECEDING AND $12 PRECEDING), $13) AS before FROM r), rc AS (SELECT u.id, rw.priority, rw.ready_at, rw.rid FROM rw, unnest(rw.ids[$14 : $2 - rw.before]) u(id) WHERE rw.before < $2), pick AS (SELECT * FROM rc WHERE NOT EXISTS (SELECT $15 FROM c) UNION ALL (SELECT * FROM (SELECT c.id, c.priority, c.ready_at, $16::bigint AS rid FROM c UNION ALL SELECT * FROM rc) x WHERE EXISTS (SELECT $17 FROM c) ORDER BY x.priority DESC, x.ready_at, x.id LIMIT $2)), took AS (SELECT pick.rid, count(*)::int AS k FROM pick WHERE pick.rid IS NOT NULL GROUP BY pick.rid), rd AS (DELETE FROM "norn".ready b USING took, r WHERE b.rid = took.rid AND r.rid = took.rid AND took.k >= cardinality(r.ids)), ru AS (UPDATE "norn".ready b SET ids = r.ids[took.k + $18:], keys = r.keys[took.k + $19:], first_id = r.ids[took.k + $20] FROM took, r WHERE b.rid = took.rid AND r.rid = took.rid AND took.k < cardinality(r.ids)), sel AS (SELECT t.*, n.now + (CASE WHEN t.max_runtime_ns > $21 THEN least(coalesce($5::bigint, t.timeout_ns), (t.max_runtime_ns + $22) / $23 * $24) ELSE coalesce($5::bigint, t.timeout_ns) END / $25) * interval $26 AS dl FROM "norn".tasks t, n WHERE t.id = ANY (ARRAY(SELECT pick.id FROM pick WHERE pick.rid IS NOT NULL)) AND t.status = n.ready AND t.ready_batch IS NOT NULL), l AS (INSERT INTO "norn".leases (queue, worker, created, timeout_ns, deadline, ids, batches, keys, kmax) SELECT $1, $4, n.now, $5::bigint, min(sel.dl), array_agg(sel.id), array_agg(DISTINCT sel.ready_batch), CASE WHEN count(sel.concurrency_key) > $27 THEN array_agg(sel.concurrency_key) END, $28::int FROM sel, n GROUP BY n.now), wl AS (SELECT $29::text AS kind, t.id, t.queue, $30::text AS status, t.version + $31 AS version, n.now AS time FROM sel t, n), upd AS (UPDATE "norn".tasks t SET status = $32, owner = $4, lease = t.lease + $33, attempts = t.attempts + $34, deadline = n.now + (CASE WHEN t.max_runtime_ns > $35 THEN least(coalesce($5::bigint, t.timeout_ns), (t.max_runtime_ns + $36) / $37 * $38) ELSE coalesce($5::bigint, t.timeout_ns) END / $39) * interval $40, updated = n.now, version = t.version + $41, history_count = t.history_count + $42, assign_seq = t.history_count + $43, claimed_at = n.now FROM n WHERE t.id = ANY (ARRAY(SELECT pick.id FROM pick WHERE pick.rid IS NULL)) AND (t.expires_at IS NULL OR t.expires_at > n.now) RETURNING t.id, t.queue, t.priority, t.status, t.progress, t.labels, t.created, t.updated, t.run_at, t.ready_at, t.ended_at, t.depends_on, t.pending_deps, t.owner, t.deadline, t.lease, t.attempts, t.max_attempts, t.retry, t.timeout_ns, t.history_count, t.log_seq, t.version, t.assign_seq, t.done_seq, t.claimed_at, t.concurrency_key, t.max_runtime_ns, t.unique_key, t.traceparent, t.tracestate, t.expires_at, t.batch, t.dep_run, t.sequence_key, t.spec, t.result, t.errors, CASE WHEN t.history_count > $44 THEN (SELECT jsonb_agg(x.e ORDER BY x.seq) FROM ( SELECT h.seq, jsonb_build_object($45, h.type, $46, h.time, $47, h.worker, $48, h.lease, $49, h.progress, $50, h.error) AS e FROM "norn".task_history_rows h WHERE h.task_id = t.id UNION ALL SELECT t.assign_seq, jsonb_build_object($51, $52, $53, t.claimed_at, $54, t.owner, $55, t.lease) WHERE t.assign_seq > greatest(t.history_count - $56, $57) UNION ALL SELECT t.done_seq, jsonb_build_object($58, $59, $60, t.ended_at, $61, t.owner, $62, t.lease, $63, $64) WHERE t.done_seq > greatest(t.history_count - $65, $66)) x) END, t.dep_results, t.signal_wait, CASE WHEN t.signal_count > $67 THEN (SELECT jsonb_agg(jsonb_build_object($68, g.seq, $69, g.name, $70, translate(encode(g.data, $71), $72, $73), $74, g.time) ORDER BY g.seq) FROM "norn".signals g WHERE g.task_id = t.id) END), tr AS (DELETE FROM "norn".task_history_rows d WHERE d.task_id = ANY (ARRAY(SELECT id FROM upd WHERE history_count > $6)) AND d.seq <= (SELECT u.history_count - $6 FROM upd u WHERE u.id = d.task_id)), w AS (UPDATE "norn".workers w SET last_seen = n.now FROM n WHERE w.id = $4 AND w.last_seen < n.now - interval $75), e AS (SELECT $76::text AS kind, id, queue, status, version, updated AS time FROM upd UNION ALL SELECT * FROM wl), evon AS (SELECT level, level = $77 AS off FROM (SELECT CASE WHEN bool_or(NOT counts_only) THEN $78 WHEN count(*) > $79 THEN $80 ELSE $81 END AS level FROM "norn".event_subscribers WHERE until > clock_timestamp()) l), ev AS (SELECT kind || chr($82) || id || chr($83) || queue || chr($84) || status || chr($85) || version::text || chr($86) || (extract($87 FROM time) * $88)::bigint::text AS line FROM e WHERE (SELECT level FROM evon) = $89 AND kind <> $90 UNION ALL SELECT kind || chr($91) || id || chr($92) || queue || chr($93) || status || chr($94) || version::text || chr($95) || (extract($96 FROM time) * $97)::bigint::text FROM e WHERE (SELECT level FROM evon) = $98 AND kind <> $99 AND kind NOT IN ($100, $101, $102) UNION ALL SELECT kind || chr($103) || chr($104) || queue || chr($105) || status || chr($106) || count(*)::text || chr($107) || (extract($108 FROM max(time)) * $109)::bigint::text FROM e WHERE (SELECT level FROM evon) = $110 AND kind IN ($111, $112, $113) GROUP BY kind, queue, status), nt AS (SELECT pg_notify($114, string_agg(line, chr($115))) FROM (SELECT line, (row_number() OVER () - $116) / $117 AS g FROM ev) x GROUP BY g UNION ALL SELECT pg_notify($118, $119) WHERE (SELECT off FROM evon) AND EXISTS (SELECT $120 FROM e WHERE status = $121) UNION ALL SELECT pg_notify($122, $123) WHERE (SELECT off FROM evon) AND EXISTS (SELECT $124 FROM e WHERE status = $125)) SELECT upd.* FROM upd WHERE (SELECT count(*) FROM nt) >= $126 UNION ALL SELECT t.id, t.queue, t.priority, $127::text, t.progress, t.labels, t.created, n.now, t.run_at, t.ready_at, t.ended_at, t.depends_on, t.pending_deps, $4::text, t.dl, t.lease + $128, t.attempts + $129, t.max_attempts, t.retry, t.timeout_ns, t.history_count + $130, t.log_seq, t.version + $131, t.history_count + $132, t.done_seq, n.now, t.concurrency_key, t.max_runtime_ns, t.unique_key, t.traceparent, t.tracestate, t.expires_at, t.batch, t.dep_run, t.sequence_key, t.spec, t.result, t.errors, $133::jsonb, $134::jsonb, $135::jsonb, $136::jsonb FROM sel t, n`,
			kindClaim},
		{"norn: a lease settled into its tasks' rows",
			`WITH n AS (SELECT coalesce($1::timestamptz, clock_timestamp()) AS now), k AS (SELECT l.id FROM "norn".leases l, n WHERE l.deadline <= n.now ORDER BY l.id FOR UPDATE), l AS (DELETE FROM "norn".leases x WHERE x.id IN (SELECT id FROM k) RETURNING x.*), upd AS (UPDATE "norn".tasks t SET status = 'running', owner = l.worker, lease = t.lease + 1, attempts = t.attempts + 1, deadline = l.created + (CASE WHEN t.max_runtime_ns > 0 THEN least(coalesce(l.timeout_ns, t.timeout_ns), (t.max_runtime_ns + 999) / 1000 * 1000) ELSE coalesce(l.timeout_ns, t.timeout_ns) END / 1000) * interval '1 microsecond', updated = l.created, version = t.version + 1, history_count = t.history_count + 1, assign_seq = t.history_count + 1, claimed_at = l.created, ready_batch = NULL, running_key = t.concurrency_key FROM l, unnest(l.ids) u(id) WHERE t.id = u.id AND t.status = 'ready' AND t.ready_batch IS NOT NULL RETURNING t.id) SELECT count(*) FROM upd`,
			kindClaim},
		{"norn: the merged completion",
			`WITH n AS (SELECT coalesce($5::timestamptz, clock_timestamp()) AS now, $7::text AS running, $8::text AS ready), lm AS (SELECT l.id AS lid, l.worker, l.created, u.id FROM "norn".leases l, unnest(l.ids) u(id) WHERE l.worker = ANY ($3::text[])), x AS (SELECT x.id, x.lease, x.worker, x.result, lm.lid, lm.created FROM unnest($1::text[], $2::bigint[], $3::text[], $4::bytea[]) AS x(id, lease, worker, result) LEFT JOIN lm ON lm.id = x.id AND lm.worker = x.worker), upd AS (UPDATE "norn".tasks t SET status = $9, progress = $10, result = x.result, deadline = $11, ended_at = n.now, updated = n.now, owner = x.worker, lease = x.lease, attempts = t.attempts + CASE WHEN t.status = n.ready THEN $12 ELSE $13 END, claimed_at = CASE WHEN t.status = n.ready THEN x.created ELSE t.claimed_at END, assign_seq = CASE WHEN t.status = n.ready THEN t.history_count + $14 ELSE t.assign_seq END, version = t.version + CASE WHEN t.status = n.ready THEN $15 ELSE $16 END, history_count = t.history_count + CASE WHEN t.status = n.ready THEN $17 ELSE $18 END, done_seq = t.history_count + CASE WHEN t.status = n.ready THEN $19 ELSE $20 END, ready_batch = $21 FROM x, n WHERE t.id = x.id AND t.id = ANY ($1::text[]) AND ( (t.status = n.running AND t.lease = x.lease AND t.owner = x.worker) OR (t.status = n.ready AND t.ready_batch IS NOT NULL AND x.lid IS NOT NULL AND x.lease = t.lease + $22)) RETURNING t.id, t.queue, t.status, t.version, t.history_count, $23::text AS kind, t.updated AS time, x.lid), tr AS (DELETE FROM "norn".task_history_rows d WHERE d.task_id = ANY (ARRAY(SELECT id FROM upd WHERE history_count > $6)) AND d.seq <= (SELECT u.history_count - $6 FROM upd u WHERE u.id = d.task_id)), evon AS (SELECT level, level = $24 AS off FROM (SELECT CASE WHEN bool_or(NOT counts_only) THEN $25 WHEN count(*) > $26 THEN $27 ELSE $28 END AS level FROM "norn".event_subscribers WHERE until > clock_timestamp()) l), ev AS (SELECT kind || chr($29) || id || chr($30) || queue || chr($31) || status || chr($32) || version::text || chr($33) || (extract($34 FROM time) * $35)::bigint::text AS line FROM upd WHERE (SELECT level FROM evon) = $36 AND kind <> $37 UNION ALL SELECT kind || chr($38) || id || chr($39) || queue || chr($40) || status || chr($41) || version::text || chr($42) || (extract($43 FROM time) * $44)::bigint::text FROM upd WHERE (SELECT level FROM evon) = $45 AND kind <> $46 AND kind NOT IN ($47, $48, $49) UNION ALL SELECT kind || chr($50) || chr($51) || queue || chr($52) || status || chr($53) || count(*)::text || chr($54) || (extract($55 FROM max(time)) * $56)::bigint::text FROM upd WHERE (SELECT level FROM evon) = $57 AND kind IN ($58, $59, $60) GROUP BY kind, queue, status), nt AS (SELECT pg_notify($61, string_agg(line, chr($62))) FROM (SELECT line, (row_number() OVER () - $63) / $64 AS g FROM ev) x GROUP BY g UNION ALL SELECT pg_notify($65, $66) WHERE (SELECT off FROM evon) AND EXISTS (SELECT $67 FROM upd WHERE status = $68) UNION ALL SELECT pg_notify($69, $70) WHERE (SELECT off FROM evon) AND EXISTS (SELECT $71 FROM upd WHERE status = $72)) SELECT id, lid FROM upd WHERE (SELECT count(*) FROM nt) >= $73`,
			kindCompletion},
		{"norn: dependents released",
			`WITH n AS (SELECT coalesce($3::timestamptz, clock_timestamp()) AS now), cand AS MATERIALIZED (SELECT b.id FROM "norn".tasks b WHERE b.status = $5 AND b.depends_on && $1::text[]), c AS (SELECT t.id FROM "norn".tasks t JOIN unnest($1::text[], $2::bigint[]) x(id, v) ON t.id = x.id AND (t.version = x.v OR (x.v IS NULL AND t.xmin = pg_current_xact_id()::xid)) WHERE t.id = ANY ($1::text[]) AND t.status = $6 AND EXISTS (SELECT $7 FROM cand)), ca AS (SELECT array_agg(id) AS ids FROM c), d AS (SELECT b.id, (SELECT count(*) FROM unnest(b.depends_on) dep WHERE dep = ANY(ca.ids) AND NOT coalesce(b.dep_results ? dep, $8))::int AS n, (SELECT jsonb_object_agg(dep.id, (SELECT jsonb_strip_nulls(jsonb_build_object($9, t.status, $10, translate(encode(t.result, $11), $12, $13))) FROM "norn".tasks t WHERE t.id = dep.id)) FROM unnest(b.depends_on) dep(id) WHERE dep.id = ANY(ca.ids) AND NOT coalesce(b.dep_results ? dep.id, $14)) AS res FROM "norn".tasks b, ca WHERE ca.ids IS NOT NULL AND b.id = ANY (ARRAY(SELECT cand.id FROM cand)) AND b.status = $15 AND b.depends_on && ca.ids ORDER BY b.id FOR UPDATE OF b), upd AS (UPDATE "norn".tasks b SET pending_deps = b.pending_deps - d.n, dep_results = coalesce(b.dep_results, $16::jsonb) || d.res, status = CASE WHEN b.pending_deps - d.n > $17 THEN $18 WHEN b.run_at > n.now THEN $19 ELSE $20 END, ready_at = CASE WHEN b.pending_deps - d.n <= $21 THEN n.now ELSE b.ready_at END, history_count = b.history_count + CASE WHEN b.pending_deps - d.n <= $22 THEN $23 ELSE $24 END, version = b.version + CASE WHEN b.pending_deps - d.n <= $25 THEN $26 ELSE $27 END, updated = CASE WHEN b.pending_deps - d.n <= $28 THEN n.now ELSE b.updated END FROM d, n WHERE b.id = d.id AND b.id = ANY (ARRAY(SELECT d.id FROM d)) AND b.status = $29 AND d.n > $30 RETURNING b.id, b.queue, b.status, b.version, b.history_count, CASE WHEN b.status = $31 THEN $32 ELSE $33 END AS kind, b.updated AS time), h AS (INSERT INTO "norn".task_history_rows (task_id, seq, type, time) SELECT id, history_count, $34, time FROM upd WHERE kind <> $35), tr AS (DELETE FROM "norn".task_history_rows d WHERE d.task_id = ANY (ARRAY(SELECT id FROM upd WHERE history_count > $4)) AND d.seq <= (SELECT u.history_count - $4 FROM upd u WHERE u.id = d.task_id)), evon AS (SELECT level, level = $36 AS off FROM (SELECT CASE WHEN bool_or(NOT counts_only) THEN $37 WHEN count(*) > $38 THEN $39 ELSE $40 END AS level FROM "norn".event_subscribers WHERE until > clock_timestamp()) l), ev AS (SELECT kind || chr($41) || id || chr($42) || queue || chr($43) || status || chr($44) || version::text || chr($45) || (extract($46 FROM time) * $47)::bigint::text AS line FROM upd WHERE (SELECT level FROM evon) = $48 AND kind <> $49 UNION ALL SELECT kind || chr($50) || id || chr($51) || queue || chr($52) || status || chr($53) || version::text || chr($54) || (extract($55 FROM time) * $56)::bigint::text FROM upd WHERE (SELECT level FROM evon) = $57 AND kind <> $58 AND kind NOT IN ($59, $60, $61) UNION ALL SELECT kind || chr($62) || chr($63) || queue || chr($64) || status || chr($65) || count(*)::text || chr($66) || (extract($67 FROM max(time)) * $68)::bigint::text FROM upd WHERE (SELECT level FROM evon) = $69 AND kind IN ($70, $71, $72) GROUP BY kind, queue, status), nt AS (SELECT pg_notify($73, string_agg(line, chr($74))) FROM (SELECT line, (row_number() OVER () - $75) / $76 AS g FROM ev) x GROUP BY g UNION ALL SELECT pg_notify($77, $78) WHERE (SELECT off FROM evon) AND EXISTS (SELECT $79 FROM upd WHERE status = $80) UNION ALL SELECT pg_notify($81, $82) WHERE (SELECT off FROM evon) AND EXISTS (SELECT $83 FROM upd WHERE status = $84)) SELECT id, status, (SELECT count(*) FROM nt) FROM upd`,
			kindCompletion},
		{"norn: lease rows locked for the completion count",
			`SELECT count(*) FROM (SELECT l.id FROM "norn".leases l WHERE l.id = ANY($1) ORDER BY l.id FOR UPDATE) x`,
			kindCompletion},
		{"norn: completions counted in lease rows",
			`UPDATE "norn".leases l SET done = l.done + k.n FROM unnest($1::bigint[], $2::int[]) k(lid, n) WHERE l.id = k.lid`,
			kindCompletion},
		{"norn: lease rows done dropped",
			`DELETE FROM "norn".leases l WHERE l.id = ANY($1) AND l.done >= cardinality(l.ids)`,
			kindCompletion},
		{"norn: the monitor's next due (reads running tasks)",
			`SELECT extract(epoch FROM least( (SELECT min(run_at) FROM "norn".tasks WHERE status = 'scheduled' AND run_at < statement_timestamp() + $1::bigint * interval '1 microsecond'), (SELECT min(deadline) FROM "norn".tasks WHERE status = 'running' AND deadline < statement_timestamp() + $1::bigint * interval '1 microsecond'), (SELECT min(deadline) FROM "norn".leases WHERE deadline < statement_timestamp() + $1::bigint * interval '1 microsecond'), (SELECT min(expires_at) FROM "norn".tasks WHERE expires_at IS NOT NULL AND status IN ('scheduled', 'blocked', 'ready') AND expires_at < statement_timestamp() + $1::bigint * interval '1 microsecond'), (SELECT min(next_fire) FROM "norn".schedules WHERE NOT paused)) - clock_timestamp())`,
			kindOther},
		{"norn: the plan settings",
			`SELECT set_config('enable_sort', 'off', true), set_config('jit', 'off', true), set_config('enable_seqscan', 'off', true), set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`,
			kindOther},
		{"river: JobInsertFastMany", riverInsert, kindSubmit},
		{"river: JobGetAvailable", riverClaim, kindClaim},
		{"river: JobSetStateIfRunningMany", riverComplete, kindCompletion},
		{"river: leader election", "-- name: LeaderAttemptElect :one\nINSERT INTO river_leader (\n    leader_id,\n    elected_at,\n    expires_at\n) VALUES (\n    $1,\n    coalesce($2::timestamptz, now()),\n    coalesce($2::timestamptz, now()) + make_interval(secs => $3)\n)\nON CONFLICT (name)\n    DO NOTHING", kindOther},
		{"river: stuck jobs", "-- name: JobGetStuck :many\nSELECT id, args, attempt FROM river_job\nWHERE state = $1\n    AND attempted_at < $2::timestamptz\nORDER BY id\nLIMIT $3", kindOther},
		{"river: queue upsert", "-- name: QueueCreateOrSetUpdatedAt :one\nINSERT INTO river_queue (\n    created_at, metadata, name, paused_at, updated_at\n) VALUES ($1, $2, $3, $4, $5)", kindOther},
		{"river: the benchmark's TRUNCATE", "TRUNCATE river_job", kindOther},
		{"river: a COPY of jobs", "copy \"river_job\" ( \"args\", \"kind\" ) from stdin binary;", kindSubmit},
	} {
		if got := classify(c.query); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// River's statements, as its driver sends them (the schema template
// empty) and pg_stat_statements keeps them (constants as parameters).
const (
	riverInsert = `-- name: JobInsertFastMany :many
WITH raw_job_data AS (
    SELECT
        unnest($1::bigint[]) AS id,
        unnest($2::jsonb[]) AS args,
        unnest($3::timestamptz[]) AS created_at,
        unnest($4::text[]) AS kind,
        unnest($5::smallint[]) AS max_attempts,
        unnest($6::jsonb[]) AS metadata,
        unnest($7::smallint[]) AS priority,
        unnest($8::text[]) AS queue,
        unnest($9::timestamptz[]) AS scheduled_at,
        unnest($10::text[]) AS state,
        unnest($11::text[]) AS tags,
        unnest($12::bytea[]) AS unique_key,
        unnest($13::integer[])::bit(8) AS unique_states
),
job_data AS (
    SELECT id, args, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at, state::river_job_state AS state,
        string_to_array(tags, $14) AS tags, unique_key, unique_states
    FROM raw_job_data
)
INSERT INTO river_job(
    id, args, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags, unique_key, unique_states
) SELECT id, args, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags, unique_key, unique_states FROM job_data
ON CONFLICT (unique_key)
    WHERE unique_key IS NOT NULL
      AND unique_states IS NOT NULL
      AND river_job_state_in_bitmask(unique_states, state)
    DO UPDATE SET kind = EXCLUDED.kind
RETURNING river_job.id, river_job.args, (xmax != $15) AS unique_skipped_as_duplicate`
	riverClaim = `-- name: JobGetAvailable :many
WITH locked_jobs AS (
    SELECT
        id, args, attempt, attempted_at, attempted_by, created_at, errors, finalized_at, kind, max_attempts, metadata, priority, queue, state, scheduled_at, tags, unique_key, unique_states
    FROM
        river_job
    WHERE
        state = $7
        AND queue = $4::text
        AND ($5::text[] IS NULL OR kind = ANY($5::text[]))
        AND scheduled_at <= coalesce($1::timestamptz, now())
    ORDER BY
        priority ASC,
        scheduled_at ASC,
        id ASC
    LIMIT $6::integer
    FOR UPDATE
    SKIP LOCKED
)
UPDATE
    river_job
SET
    state = $8,
    attempt = river_job.attempt + $9,
    attempted_at = coalesce($1::timestamptz, now()),
    attempted_by = array_append(
        CASE WHEN array_length(river_job.attempted_by, $10) >= $2::int
        THEN river_job.attempted_by[array_length(river_job.attempted_by, $11) + $12 - $2:]
        ELSE river_job.attempted_by
        END,
        $3::text
    )
FROM
    locked_jobs
WHERE
    river_job.id = locked_jobs.id
RETURNING
    river_job.id, river_job.args, river_job.attempt, river_job.attempted_at, river_job.attempted_by, river_job.created_at, river_job.errors, river_job.finalized_at, river_job.kind, river_job.max_attempts, river_job.metadata, river_job.priority, river_job.queue, river_job.state, river_job.scheduled_at, river_job.tags, river_job.unique_key, river_job.unique_states`
	riverComplete = `-- name: JobSetStateIfRunningMany :many
WITH job_input AS (
    SELECT
        unnest($1::bigint[])                     AS id,
        unnest($2::boolean[])      AS attempt_do_update,
        unnest($3::int[])                    AS attempt,
        unnest($12::text[])::river_job_state AS state
),
updated AS (
    UPDATE river_job
    SET
        finalized_at = CASE
            WHEN river_job.state = $14
                 AND job_input.finalized_at_do_update
            THEN job_input.finalized_at
            ELSE river_job.finalized_at
        END,
        state = CASE
            WHEN river_job.state = $15
            THEN job_input.state
            ELSE river_job.state
        END
    FROM job_input
    WHERE river_job.id = job_input.id
      AND (river_job.state = $16 OR job_input.metadata_do_merge)
    RETURNING river_job.id, river_job.args, river_job.attempt
)
SELECT id, args, attempt FROM updated
ORDER BY id`
)
