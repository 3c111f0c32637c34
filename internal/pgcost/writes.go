package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The -writes mode measures what a different per-task write pattern would
// buy before anyone builds it: a claim-and-complete burn-down of -n tasks
// on a copy of Norn's task table (same columns, constraints and, for rows,
// indexes), by SQL alone, without the store's other work (history trim,
// events, claim hints, workers' last-seen). Patterns:
//
//   - rows: the store's pattern. The ready tasks are found in the claim
//     index of the task table; a claim locks them and updates each row to
//     running, a completion updates it to completed. status is in the
//     partial indexes' predicates, so both updates are non-HOT: each
//     writes a new row version and primary-key and partial-index entries.
//   - ready: the ready tasks are rows of their own, a narrow table in claim
//     order; a claim deletes its rows there and writes one lease row for the
//     batch; the task table has its primary key only, so its updates to
//     running and to completed can be HOT (a new version on the same page,
//     no index entry) when the page has room (-fillfactor).
//   - lease: ready as well, but the claim does not touch the task rows at
//     all (a task is running while a lease row names it): one update per
//     task, at completion.
//   - side-spec: rows, with the spec in a table of its own (id, spec)
//     written by the submit and read by the claim (a primary-key lookup
//     per task), so the claim and the completion rewrite a row narrower by
//     the spec: what the spec's width costs the rows pattern.
//   - hot-done: rows, with indexes that no completion changes, so that the
//     completion can be HOT while the claim stays as it is. No index names
//     status, deadline or ended_at: the partial indexes select on phase
//     (ready, scheduled or blocked while the task is; the claim clears it),
//     expired leases are found by watch_at (set by the claim, left as it
//     is by the completion: a monitor reads it from a watermark on, since
//     completed tasks stay in it), and retention by a row per completion
//     batch in ended (ended_at, status, ids). The live-unique and running-
//     key indexes select on columns that are NULL for tasks without a key.
//   - uuid-id: rows, with the id a native uuid (16 bytes) instead of text
//     (36 characters and a length byte) in the heap, the primary key and
//     the claim index: what the text keys cost the rows pattern.
//
// Each pattern's completion is a compare-and-set on the task's state, as
// the store's is, so a task completed twice, or never, shows in the counts
// the run returns. lease's completion does not also check that a lease row
// still names the task, which a store would (one lookup per batch, by the
// lease row's id): the figures leave that out.
var writePatterns = []string{"rows", "ready", "lease", "side-spec", "hot-done", "uuid-id"}

// writesTable creates, in schema, a task table like the one in like (a
// migrated Norn schema) and the pattern's other tables, and fill (if not
// nil) is called around the statements that fill them with n ready tasks,
// which it must run (what a submit of n tasks writes under the pattern).
// Each task's spec is specBytes long (a JSON object; 2 is "{}").
func writesTable(ctx context.Context, c *pgx.Conn, schema, like, pattern string, n, fillfactor, specBytes int, fill func(func() error) error) error {
	s, l := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{like}.Sanitize()
	idx := ""
	if pattern == "rows" || pattern == "side-spec" || pattern == "uuid-id" {
		idx = " INCLUDING INDEXES"
	}
	create := []string{
		`DROP TABLE IF EXISTS ` + s + `.t, ` + s + `.ready, ` + s + `.leases, ` + s + `.specs, ` + s + `.ended`,
		`CREATE TABLE ` + s + `.t (LIKE ` + l + `.tasks INCLUDING DEFAULTS INCLUDING CONSTRAINTS` + idx + `) WITH (fillfactor = ` + strconv.Itoa(fillfactor) + `)`,
	}
	// The ready patterns' submit writes the ready row in the same statement.
	insert := `INSERT INTO ` + s + `.t (id, queue, spec, priority, status, labels, created, updated, run_at, ready_at, timeout_ns)
		SELECT gen_random_uuid()::text, 'q', ` + writesSpec(specBytes) + `, 0, 'ready', '{"a":"b"}'::jsonb, now(), now(), now(),
			now() + i * interval '1 microsecond', 10000000000 FROM generate_series(1, ` + strconv.Itoa(n) + `) i`
	after := []string{`VACUUM ANALYZE ` + s + `.t`}
	switch pattern {
	case "uuid-id":
		// The indexes on id are rebuilt for the new type (on an empty
		// table).
		create = append(create, `ALTER TABLE `+s+`.t ALTER COLUMN id TYPE uuid USING id::uuid`)
		insert = strings.Replace(insert, "gen_random_uuid()::text", "gen_random_uuid()", 1)
	case "side-spec":
		// The task row carries {}; the spec is the side table's.
		create = append(create, `CREATE TABLE `+s+`.specs (id text COLLATE "C" PRIMARY KEY, spec bytea NOT NULL)`)
		insert = `WITH t AS (` + strings.Replace(insert, writesSpec(specBytes), writesSpec(2), 1) + ` RETURNING id)
		INSERT INTO ` + s + `.specs SELECT id, ` + writesSpec(specBytes) + ` FROM t`
		after = append(after, `VACUUM ANALYZE `+s+`.specs`)
	case "hot-done":
		// The store's indexes, each selecting on a column the completion
		// leaves as it is.
		create = append(create,
			`ALTER TABLE `+s+`.t ADD PRIMARY KEY (id), ADD COLUMN phase text, ADD COLUMN watch_at timestamptz, ADD COLUMN live_unique text`,
			`CREATE INDEX ON `+s+`.t (queue, priority DESC, ready_at, id) WHERE phase = 'ready'`,
			`CREATE INDEX ON `+s+`.t (run_at) WHERE phase = 'scheduled'`,
			`CREATE INDEX ON `+s+`.t (watch_at) WHERE watch_at IS NOT NULL`,
			`CREATE INDEX ON `+s+`.t USING gin (depends_on) WHERE phase = 'blocked'`,
			`CREATE UNIQUE INDEX ON `+s+`.t (queue, live_unique) WHERE live_unique IS NOT NULL`,
			`CREATE INDEX ON `+s+`.t (unique_key, queue) WHERE unique_key IS NOT NULL`,
			`CREATE INDEX ON `+s+`.t USING gin (depends_on) WHERE depends_on IS NOT NULL`,
			`CREATE INDEX ON `+s+`.t (queue, fair_key, priority DESC, ready_at, id) WHERE phase = 'ready' AND fair_key IS NOT NULL`,
			`CREATE INDEX ON `+s+`.t (queue, running_key) WHERE running_key IS NOT NULL`,
			`CREATE INDEX ON `+s+`.t (queue, concurrency_key, priority DESC, ready_at, id) WHERE phase = 'ready' AND concurrency_key IS NOT NULL`,
			`CREATE TABLE `+s+`.ended (ended_at timestamptz NOT NULL, status text NOT NULL, ids text[] NOT NULL)`,
			`CREATE INDEX ON `+s+`.ended (status, ended_at)`)
		insert = strings.Replace(strings.Replace(insert, "timeout_ns)", "timeout_ns, phase)", 1),
			"10000000000 FROM", "10000000000, 'ready' FROM", 1)
	case "ready", "lease":
		create = append(create,
			`ALTER TABLE `+s+`.t ADD PRIMARY KEY (id)`,
			`CREATE TABLE `+s+`.ready (queue text COLLATE "C" NOT NULL, priority int NOT NULL, ready_at timestamptz NOT NULL, id text COLLATE "C" NOT NULL)`,
			`CREATE INDEX ready_claim ON `+s+`.ready (queue, priority DESC, ready_at, id)`,
			`CREATE TABLE `+s+`.leases (id bigserial PRIMARY KEY, worker text NOT NULL, deadline timestamptz NOT NULL, ids text[] NOT NULL)`,
			`CREATE INDEX leases_deadline ON `+s+`.leases (deadline)`)
		insert = `WITH t AS (` + insert + ` RETURNING queue, priority, ready_at, id)
		INSERT INTO ` + s + `.ready SELECT queue, priority, ready_at, id FROM t`
		after = append(after, `VACUUM ANALYZE `+s+`.ready`)
	}
	exec := func(qs ...string) error {
		for _, q := range qs {
			if _, err := c.Exec(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	}
	if err := exec(create...); err != nil {
		return err
	}
	if fill == nil {
		fill = func(f func() error) error { return f() }
	}
	if err := fill(func() error { return exec(insert) }); err != nil {
		return err
	}
	return exec(after...)
}

// writesSpec is the SQL of a spec of n bytes: {} or {"x":"aa…"}.
func writesSpec(n int) string {
	if n < 9 {
		return `'\x7b7d'::bytea`
	}
	return `convert_to('{"x":"' || repeat('a', ` + strconv.Itoa(n-8) + `) || '"}', 'UTF8')`
}

// writesSQL returns the pattern's claim ($1 how many, $2 worker; it returns
// the claimed tasks' id, spec, lease and labels, as the store's claim reads
// them) and completion ($1 ids, $2 worker).
func writesSQL(schema, pattern string) (claim, complete string) {
	s := pgx.Identifier{schema}.Sanitize()
	const running = `status = 'running', owner = $2, lease = t.lease + 1, attempts = t.attempts + 1,
	deadline = now() + interval '10 s', updated = now(), version = t.version + 1, claimed_at = now(),
	assign_seq = t.history_count + 1, history_count = t.history_count + 1`
	const returning = ` RETURNING t.id, t.spec, t.lease, t.labels`
	// The ready patterns' claim: take the first ready rows, delete them and
	// write the batch's lease row.
	const fromReady = `WITH c AS (SELECT r.ctid AS rc, r.id FROM {s}.ready r WHERE r.queue = 'q'
	ORDER BY r.priority DESC, r.ready_at, r.id LIMIT $1 FOR UPDATE SKIP LOCKED),
d AS (DELETE FROM {s}.ready r WHERE r.ctid = ANY (ARRAY(SELECT c.rc FROM c)) RETURNING r.id),
l AS (INSERT INTO {s}.leases (worker, deadline, ids) SELECT $2, now() + interval '10 s', array_agg(d.id) FROM d HAVING count(*) > 0)
`
	complete = `UPDATE {s}.t t SET status = 'completed', ended_at = now(), updated = now(), owner = NULL, deadline = NULL,
	version = t.version + 1, done_seq = t.history_count + 1, history_count = t.history_count + 1
WHERE t.id = ANY ($1) AND t.status = 'running' AND t.owner = $2`
	switch pattern {
	case "rows", "uuid-id":
		claim = `WITH c AS (SELECT id FROM {s}.t WHERE status = 'ready' AND queue = 'q'
	ORDER BY priority DESC, ready_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE {s}.t t SET ` + running + ` WHERE t.id = ANY (ARRAY(SELECT c.id FROM c))` + returning
	case "ready":
		claim = fromReady + `UPDATE {s}.t t SET ` + running + ` WHERE t.id = ANY (ARRAY(SELECT d.id FROM d))` + returning
	case "side-spec":
		claim = `WITH c AS (SELECT id FROM {s}.t WHERE status = 'ready' AND queue = 'q'
	ORDER BY priority DESC, ready_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE {s}.t t SET ` + running + ` WHERE t.id = ANY (ARRAY(SELECT c.id FROM c))
	RETURNING t.id, (SELECT sp.spec FROM {s}.specs sp WHERE sp.id = t.id), t.lease, t.labels`
	case "hot-done":
		claim = `WITH c AS (SELECT id FROM {s}.t WHERE phase = 'ready' AND queue = 'q'
	ORDER BY priority DESC, ready_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
UPDATE {s}.t t SET ` + running + `, phase = NULL, watch_at = now() + interval '10 s'
	WHERE t.id = ANY (ARRAY(SELECT c.id FROM c))` + returning
		// The completion returns how many it applied, as the other
		// patterns' row count says.
		complete = `WITH u AS (` + complete + ` RETURNING t.id),
e AS (INSERT INTO {s}.ended SELECT now(), 'completed', array_agg(u.id) FROM u HAVING count(*) > 0 RETURNING cardinality(ids) AS n)
SELECT coalesce(sum(n), 0) FROM e`
	case "lease":
		claim = fromReady + `SELECT t.id, t.spec, t.lease, t.labels FROM {s}.t t WHERE t.id = ANY (ARRAY(SELECT d.id FROM d))`
		// A leased task's row still says ready; its completion is the
		// compare-and-set from there (the lease row says whose it is).
		complete = `UPDATE {s}.t t SET status = 'completed', ended_at = now(), updated = now(), owner = $2,
	lease = t.lease + 1, attempts = t.attempts + 1, version = t.version + 1, done_seq = t.history_count + 1,
	history_count = t.history_count + 1
WHERE t.id = ANY ($1) AND t.status = 'ready'`
	}
	return strings.ReplaceAll(claim, "{s}", s), strings.ReplaceAll(complete, "{s}", s)
}

// writesBurn claims and completes every task of the pattern's table with
// workers concurrent workers claiming claim at a time, and returns how many
// completions applied.
func writesBurn(ctx context.Context, pool *pgxpool.Pool, schema, pattern string, workers, claim int) (int64, error) {
	claimSQL, completeSQL := writesSQL(schema, pattern)
	var done atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := "w" + strconv.Itoa(w)
			for {
				rows, err := pool.Query(ctx, claimSQL, claim, worker)
				if err != nil {
					errc <- err
					return
				}
				ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
					var id string
					var spec []byte
					var lease int64
					var labels map[string]any
					err := r.Scan(&id, &spec, &lease, &labels)
					return id, err
				})
				if err != nil {
					errc <- err
					return
				}
				if len(ids) == 0 {
					return
				}
				var n int64
				if pattern == "hot-done" {
					err = pool.QueryRow(ctx, completeSQL, ids, worker).Scan(&n)
				} else {
					var tag pgconn.CommandTag
					tag, err = pool.Exec(ctx, completeSQL, ids, worker)
					n = tag.RowsAffected()
				}
				if err != nil {
					errc <- err
					return
				}
				done.Add(n)
			}
		}()
	}
	wg.Wait()
	close(errc)
	return done.Load(), <-errc
}

// runWrites is the -writes mode: each pattern in turn on a fresh table in
// the schema norn_writes, reported as one line per pattern.
func runWrites(ctx context.Context, url string, pm int, patterns []string, n, workers, claim, fillfactor, specBytes int) {
	const schema, like = "norn_writes", "norn"
	c, err := pgx.Connect(ctx, url)
	must(err)
	defer c.Close(ctx)
	pool, err := pgxpool.New(ctx, url)
	must(err)
	defer pool.Close()
	_, err = c.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize())
	must(err)
	for _, p := range patterns {
		_, err = c.Exec(ctx, `CHECKPOINT`)
		must(err)
		var a, b snap
		must(writesTable(ctx, c, schema, like, p, n, fillfactor, specBytes, func(fill func() error) error {
			stats(ctx, c, &a)
			a0 := take(ctx, c, pm)
			a.db, a.cl, a.lsn, a.t = a0.db, a0.cl, a0.lsn, a0.t
			if err := fill(); err != nil {
				return err
			}
			b = take(ctx, c, pm)
			stats(ctx, c, &b)
			return nil
		}))
		report("writes-"+p+"-submit", a, b, n, map[string]any{"fillfactor": fillfactor, "spec": specBytes})
		_, err = c.Exec(ctx, `CHECKPOINT`)
		must(err)
		a = snap{}
		stats(ctx, c, &a)
		a0 := take(ctx, c, pm)
		a.db, a.cl, a.lsn, a.t = a0.db, a0.cl, a0.lsn, a0.t
		done, err := writesBurn(ctx, pool, schema, p, workers, claim)
		must(err)
		b = take(ctx, c, pm)
		stats(ctx, c, &b)
		var hot, upd float64
		must(c.QueryRow(ctx, `SELECT n_tup_hot_upd, n_tup_upd FROM pg_stat_user_tables WHERE relid = $1::regclass`,
			pgx.Identifier{schema, "t"}.Sanitize()).Scan(&hot, &upd))
		report("writes-"+p, a, b, int(done), map[string]any{"fillfactor": fillfactor, "spec": specBytes, "hot_share": round2(hot / max(upd, 1))})
	}
	_, _ = c.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
}
