package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
	"github.com/nornq/norn/store/storetest"
)

func TestMigrationsWellFormed(t *testing.T) {
	t.Parallel()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 || ms[0].Version != 1 {
		t.Fatalf("migrations %+v", ms)
	}
}

func TestMigrateUpDownStatusAndOpenRefusal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	// Unmigrated: Open refuses and says how to fix it.
	_, err := Open(ctx, Config{URL: url, Schema: schema})
	if !errors.Is(err, norn.ErrUnavailable) || !strings.Contains(err.Error(), "norn migrate up") {
		t.Fatalf("Open on an unmigrated schema: %v", err)
	}
	st, err := Status(ctx, url, schema)
	if err != nil || st.Current != 0 || len(st.Pending) != LatestVersion() {
		t.Fatalf("Status before: %+v, %v", st, err)
	}
	st, err = Migrate(ctx, url, schema, -1)
	if err != nil || st.Current != LatestVersion() || len(st.Pending) != 0 || len(st.Applied) != LatestVersion() {
		t.Fatalf("Migrate up: %+v, %v", st, err)
	}
	// Idempotent.
	if _, err := Migrate(ctx, url, schema, -1); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, Config{URL: url, Schema: schema, DisableMonitor: true})
	if err != nil {
		t.Fatalf("Open after migrate: %v", err)
	}
	s.Close()
	// A schema newer than this binary is refused, by Open and by Migrate.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "INSERT INTO "+quoteIdent(schema)+".schema_migrations VALUES (999, 'future', now())"); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, Config{URL: url, Schema: schema, Migrate: true})
	if err == nil || !strings.Contains(err.Error(), "newer than this binary") {
		t.Fatalf("Open on a newer schema: %v", err)
	}
	if _, err := conn.Exec(ctx, "DELETE FROM "+quoteIdent(schema)+".schema_migrations WHERE version = 999"); err != nil {
		t.Fatal(err)
	}
	// Down to zero removes every table.
	st, err = Migrate(ctx, url, schema, 0)
	if err != nil || st.Current != 0 {
		t.Fatalf("Migrate down: %+v, %v", st, err)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename <> 'schema_migrations'", schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d tables left after migrating down (%v)", n, err)
	}
}

func TestSubmitTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	conn, err := pgx.Connect(ctx, s.cfg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, commit := range []bool{true, false} {
		id := "rolled-back"
		if commit {
			id = "committed"
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.SubmitTx(ctx, tx, norn.NewTask{ID: id, Queue: "q"})
		if err != nil || len(res) != 1 || res[0].Task.ID != id {
			t.Fatalf("SubmitTx: %+v, %v", res, err)
		}
		// Invisible to the store until the transaction commits.
		if _, err := s.Get(ctx, id); !errors.Is(err, norn.ErrNotFound) {
			t.Fatalf("task visible before commit: %v", err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Get(ctx, id)
		if commit && err != nil {
			t.Fatalf("committed task: %v", err)
		}
		if !commit && !errors.Is(err, norn.ErrNotFound) {
			t.Fatalf("rolled back task: %v", err)
		}
	}
	got, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})
	if err != nil || len(got) != 1 || got[0].ID != "committed" {
		t.Fatalf("claim after SubmitTx: %v, %v", got, err)
	}
}

// TestSweepNeverOverwritesRacingChange pauses each sweep between its read
// and its write and lets a worker complete (or a client cancel) the task in
// between: the sweep's compare-and-set must then change nothing.
func TestSweepNeverOverwritesRacingChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := storetest.NewFakeClock()
	var race func()
	s := openTest(t, clock, func(c *Config) {
		c.DisableMonitor = true
		c.sweepPause = func() {
			if race != nil {
				race()
				race = nil
			}
		}
	})
	if _, err := s.Submit(ctx, norn.NewTask{ID: "run", Queue: "q"}, norn.NewTask{ID: "later", Queue: "q", Delay: norn.Duration(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	clock.Advance(time.Hour) // the lease expired and the delay is due
	race = func() {
		if err := s.Complete(ctx, norn.LeaseRef{TaskID: "run", Worker: "w", Lease: got[0].Lease}, json.RawMessage(`"done"`)); err != nil {
			t.Errorf("racing Complete: %v", err)
		}
		if _, err := s.Cancel(ctx, "later"); err != nil {
			t.Errorf("racing Cancel: %v", err)
		}
	}
	rep, err := s.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.TimedOut != 0 || rep.Released != 0 {
		t.Fatalf("sweep report %+v: it overwrote racing changes", rep)
	}
	if tk, _ := s.Get(ctx, "run"); tk.Status != norn.StatusCompleted || string(tk.Result) != `"done"` {
		t.Fatalf("completed task after racing sweep: %s %s", tk.Status, tk.Result)
	}
	if tk, _ := s.Get(ctx, "later"); tk.Status != norn.StatusCancelled {
		t.Fatalf("cancelled task after racing sweep: %s", tk.Status)
	}
}

// TestMonitorLeaderFailover runs two nodes: exactly one leads; when its
// lock session is killed the lead passes on within seconds, and the
// monitor keeps timing out expired leases with the real database clock.
func TestMonitorLeaderFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	open := func() *Store {
		s, err := Open(ctx, Config{URL: url, Schema: schema, Migrate: true, LeaderRetry: 100 * time.Millisecond,
			SweepInterval: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b := open(), open()
	leaders := func() int {
		n := 0
		for _, s := range []*Store{a, b} {
			if s.IsLeader() {
				n++
			}
		}
		return n
	}
	await.Until(t, 10*time.Second, "a leader", func() bool { return leaders() == 1 })
	old := a
	if b.IsLeader() {
		old = b
	}
	key := old.cfg.LeaderLockKey
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var killed int
	err = conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory'
		AND classid = $1 AND objid = $2 AND granted`, int64(uint32(uint64(key)>>32)), int64(uint32(uint64(key)))).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminated %d leader sessions (%v)", killed, err)
	}
	await.Until(t, 10*time.Second, "the old leader to notice", func() bool { return !old.IsLeader() || leaders() == 1 })
	await.Until(t, 10*time.Second, "a new leader", func() bool { return leaders() == 1 })

	// The monitor works: a lease of 100ms expires and the task is ready again.
	if _, err := a.Submit(ctx, norn.NewTask{ID: "t", Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	got, err := b.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, Timeout: norn.Duration(100 * time.Millisecond)})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	await.Until(t, 10*time.Second, "the lease to time out", func() bool {
		tk, err := a.Get(ctx, "t")
		return err == nil && tk.Status == norn.StatusReady
	})
}

// TestListenerReconnects kills the listener's session: after it
// reconnects, a submit on another node still wakes a waiting claim long
// before the (hour-long) polling fallback would.
// openNodes opens n stores on one fresh schema, as n nodes of a cluster:
// no monitor, and claims that wait only for notifications (PollInterval
// an hour). It returns the database's URL too.
func openNodes(t *testing.T, n int) (string, []*Store) {
	return openNodesWith(t, n, nil)
}

// openNodesWith is openNodes with each node's Config changed by set (nil:
// none) before it opens.
func openNodesWith(t *testing.T, n int, set func(i int, c *Config)) (string, []*Store) {
	t.Helper()
	url, schema := pgtest.Schema(t)
	nodes := make([]*Store, n)
	for i := range nodes {
		cfg := Config{URL: url, Schema: schema, Migrate: true, PollInterval: time.Hour, DisableMonitor: true}
		if set != nil {
			set(i, &cfg)
		}
		s, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		nodes[i] = s
	}
	return url, nodes
}

func TestListenerReconnects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The first node tells when its claim waits: the submit must find it
	// waiting, or a lost wake-up would go unnoticed (the claim would find
	// the task at its first look).
	waiting := make(chan struct{}, 1)
	url, nodes := openNodesWith(t, 2, func(i int, c *Config) {
		if i == 0 {
			c.claimWaits = func() {
				select {
				case waiting <- struct{}{}:
				default:
				}
			}
		}
	})
	waiter, submitter := nodes[0], nodes[1]
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	listeners := func() []int32 {
		rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE query = $1 ORDER BY pid`, "LISTEN "+quoteIdent(waiter.channel))
		if err != nil {
			t.Fatal(err)
		}
		pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			t.Fatal(err)
		}
		return pids
	}
	before := listeners()
	if len(before) != 2 {
		t.Fatalf("%d listener sessions, want 2", len(before))
	}
	if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) pid", before); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "listeners to reconnect", func() bool {
		now := listeners()
		return len(now) == 2 && now[0] != before[0] && now[1] != before[1] && now[0] != before[1]
	})
	done := make(chan []*norn.Task, 1)
	go func() {
		got, err := waiter.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"lp"}, Wait: norn.Duration(time.Minute)})
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	select {
	case <-waiting:
	case <-time.After(15 * time.Second):
		t.Fatal("the claim did not start waiting")
	}
	if _, err := submitter.Submit(ctx, norn.NewTask{ID: "x", Queue: "lp"}); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		if len(got) != 1 || got[0].ID != "x" {
			t.Fatalf("woken claim got %v", got)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a submit on another node did not wake the waiting claim")
	}
}

// TestDatabaseRestart: while PostgreSQL is down calls fail with
// unavailable (never a panic or a hang); after it is back the store
// works again by itself, and nothing committed was lost.
func TestDatabaseRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgtest.NewCluster(t)
	s, err := Open(ctx, Config{URL: c.URL(), Schema: "norn", Migrate: true, LeaderRetry: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Submit(ctx, norn.NewTask{ID: "kept", Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop("immediate"); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = s.Get(cctx, "kept")
	if !errors.Is(err, norn.ErrUnavailable) {
		t.Fatalf("Get with the database down: %v (code %s), want unavailable", err, norn.CodeOf(err))
	}
	_, err = s.Submit(cctx, norn.NewTask{Queue: "q"})
	if !errors.Is(err, norn.ErrUnavailable) {
		t.Fatalf("Submit with the database down: %v, want unavailable", err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	await.Until(t, 20*time.Second, "the store to recover", func() bool {
		_, err := s.Get(ctx, "kept")
		return err == nil
	})
	// Claims are woken again once the listener is back.
	var wg sync.WaitGroup
	wg.Add(1)
	var got []*norn.Task
	go func() {
		defer wg.Done()
		got, _ = s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q2"}, Wait: norn.Duration(20 * time.Second)})
	}()
	if _, err := s.Submit(ctx, norn.NewTask{ID: "after", Queue: "q2"}); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(got) != 1 || got[0].ID != "after" {
		t.Fatalf("claim after restart: %v", got)
	}
}

// TestClaimPlanWithStaleStatistics: statistics taken on an empty table
// made the planner estimate a backlog at one row and prefer a bitmap scan
// of the whole queue plus a sort (and, with sorts disabled, JIT-compile
// every claim). Claims, due delays and expired leases must read the head of
// their partial index in order, whatever the statistics say.
func TestClaimPlanWithStaleStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, s.q(`ANALYZE {s}.tasks`))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		nts := make([]norn.NewTask, 1000)
		for j := range nts {
			nts[j] = norn.NewTask{Queue: "q", Priority: uint32(j % 3)}
			if j%2 == 0 {
				nts[j].Delay = norn.Duration(time.Hour)
			}
		}
		if _, err := s.Submit(ctx, nts...); err != nil {
			t.Fatal(err)
		}
	}
	plan := func(sql string, args ...any) string {
		var out []string
		err := s.withConn(ctx, func(conn *pgx.Conn) error {
			b := &pgx.Batch{}
			b.Queue(noSortSQL)
			b.Queue("EXPLAIN "+sql, args...)
			br := conn.SendBatch(ctx, b)
			defer br.Close()
			if _, err := br.Exec(); err != nil {
				return err
			}
			rows, err := br.Query()
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(out, "\n")
	}
	for _, c := range []struct {
		name, sql, index string
		args             []any
	}{
		{"claim with ready rows", s.sql.leaseClaim, "Index Scan using tasks_claim", []any{"q", 100, nil, "w", nil, 100, 4}},
		{"claim with ready rows", s.sql.leaseClaim, "Index Scan using ready_claim", []any{"q", 100, nil, "w", nil, 100, 4}},
		{"delays", s.delaySQL(), "Index Scan using tasks_scheduled", []any{nil, 1000, 100}},
	} {
		p := plan(c.sql, c.args...)
		if !strings.Contains(p, c.index) || strings.Contains(p, "Bitmap Index Scan on "+strings.TrimPrefix(c.index, "Index Scan using ")) ||
			strings.Contains(p, "JIT") {
			t.Errorf("%s plan does not read %s in order:\n%s", c.name, c.index, p)
		}
	}
	// The claim and the dependents' release run cached generic plans
	// (claimSetupSQL, genericPlanGUCs): planned once for any LIMIT, they
	// must still read the indexes, never a whole table.
	generic := func(setup, sql, args string) string { return genericPlan(t, s, setup, sql, args) }
	p := generic(claimSetupSQL, s.sql.leaseClaim, "'q', 100, NULL, 'w', NULL, 100, 4")
	if !strings.Contains(p, "Index Scan using tasks_claim") || !strings.Contains(p, "Index Scan using ready_claim") ||
		strings.Contains(p, "Seq Scan on tasks ") || strings.Contains(p, "Hash Join") ||
		strings.Contains(p, "Bitmap Index Scan on tasks_claim") || strings.Contains(p, "Bitmap Index Scan on ready_claim") {
		t.Errorf("generic claim plan with ready rows does not read tasks_claim and ready_claim in order and join by key:\n%s", p)
	}
	p = generic("SELECT "+hashJoinGUCs, s.releaseSQL(), "ARRAY['a','b'], ARRAY[NULL,NULL]::bigint[], NULL, 100")
	if !strings.Contains(p, "$1") || !strings.Contains(p, "tasks_blocked_deps") || strings.Contains(p, "Seq Scan on tasks ") {
		t.Errorf("generic release plan does not probe tasks_blocked_deps:\n%s", p)
	}
	var jit string
	err = s.withConn(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, "SHOW jit").Scan(&jit)
	})
	if err != nil || jit != "off" {
		t.Fatalf("jit = %q (%v), want off on the store's sessions", jit, err)
	}
}

// TestPlansOnADrainedTable checks the plans of the monitor's reads
// of the task table made while it is empty, as after a queue drained and
// VACUUM truncated it: the monitor runs them several times a second, so
// such a plan gets cached and is kept when the next backlog arrives, until
// autovacuum analyzes the table again (up to a minute or more). A
// sequential scan costs nothing on an empty table; kept for a backlog of
// 200,000 tasks, each read took 20–40 ms, about a quarter of the
// database's CPU during the burn-down. Planned after sweepSetupSQL, each
// must read its index, and join by key. The flow paths' counts of running
// tasks (the shared and keyed claims' verdict, the exclusive claim's count
// by key, FlowStats for the metrics) are periodic too, and checked the
// same way.
func TestPlansOnADrainedTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	if _, err := s.Submit(ctx, norn.NewTask{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, s.q(`DELETE FROM {s}.tasks`)); err != nil {
			return err
		}
		_, err := conn.Exec(ctx, s.q(`VACUUM ANALYZE {s}.tasks`))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	generic := ", set_config('plan_cache_mode', 'force_generic_plan', true)"
	for _, c := range []struct{ name, setup, sql, args, index string }{
		{"next due", sweepSetupSQL, s.q(nextDueSQL), "1000000", "tasks_running"},
		{"expired leases", sweepSetupSQL, s.sweepCandidatesSQL(timeoutCond, timeoutOrder), "now(), 1000", "tasks_running"},
		{"due delays", sweepSetupSQL, s.delaySQL(), "NULL, 1000, 100", "tasks_scheduled"},
		{"retention", sweepSetupSQL, s.retentionSQL("retention_completed_ns"), "'completed', now(), 1, now(), 1000", "tasks_ended"},
		{"purge", sweepSetupSQL, s.purgeSQL(), "ARRAY['a'], 'completed', now()", "tasks_pkey"},
		// The running tasks are all of tasks_running: reading it whole is
		// the point.
		{"exclusive claim's running count", noSeqScanSQL, s.q(runningByKeySQL), "'q'", "tasks_running"},
		{"flow verdict", "SELECT " + verdictGUCs, s.q(sharedVerdictSQL), "'q', 100, false, 100", "tasks_running"},
		{"flow stats", noSeqScanSQL, s.q(flowStatsSQL), "", "tasks_running"},
	} {
		p := genericPlan(t, s, c.setup+generic, c.sql, c.args)
		if strings.Contains(p, "Seq Scan on tasks") || !strings.Contains(p, "using "+c.index+" on tasks") {
			t.Errorf("%s: planned on an empty table, the plan does not read %s:\n%s", c.name, c.index, p)
		}
		if c.setup == sweepSetupSQL {
			checkBatchPlan(t, c.name, p)
		}
		if c.name == "retention" && !strings.Contains(p, "using queues_pkey") {
			t.Errorf("retention: each task's queue is not found by queues_pkey:\n%s", p)
		}
	}
}

// TestHotPlansAfterChurn checks the cached generic plans of the claim and
// the completion after the statistics were taken when the table had many
// pages and almost no live rows — the state a queue is in after a
// burn-down and the clean-up of its tasks, when autovacuum analyzes it.
// With such statistics the planner once put an unconditioned scan of
// tasks_pkey (sequential scans being disabled) on the outer side of the
// join with the batch, and every claim and completion then read the whole
// table: burn-downs collapsed to a few thousand tasks per second. Every
// scan of tasks_pkey in these plans must have an index condition.
func TestHotPlansAfterChurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	var last string
	for i := 0; i < 10; i++ {
		nts := make([]norn.NewTask, 1000)
		for j := range nts {
			nts[j] = norn.NewTask{Queue: "churn", Spec: json.RawMessage(`{"p":"` + strings.Repeat("x", 200) + `"}`)}
		}
		subs, err := s.Submit(ctx, nts...)
		if err != nil {
			t.Fatal(err)
		}
		last = subs[len(subs)-1].Task.ID
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if err := s.withConn(ctx, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, s.q(sql), args...)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// One live row at the end keeps VACUUM from truncating the pages.
	exec(`DELETE FROM {s}.tasks WHERE id <> $1`, last)
	exec(`VACUUM ANALYZE {s}.tasks`)
	for i := 0; i < 20; i++ {
		nts := make([]norn.NewTask, 1000)
		for j := range nts {
			nts[j] = norn.NewTask{Queue: "q"}
		}
		if _, err := s.Submit(ctx, nts...); err != nil {
			t.Fatal(err)
		}
	}
	generic := func(setup, sql, args string) string { return genericPlan(t, s, setup, sql, args) }
	for _, c := range []struct{ name, setup, sql, args string }{
		{"claim", claimSetupSQL, s.sql.leaseClaim, "'q', 100, NULL, 'w', NULL, 100, 4"},
		{"claim by ids", claimSetupSQL, s.sql.claimIDs, "ARRAY['a','b'], 100, NULL, 'w', NULL, 100"},
		{"completion", "SELECT " + hashJoinGUCs, s.completeSQL(),
			"ARRAY['a','b'], ARRAY[1,1]::bigint[], ARRAY['w','w'], ARRAY[NULL,NULL]::bytea[], NULL, 100"},
		{"release", "SELECT " + hashJoinGUCs, s.releaseSQL(), "ARRAY['a','b'], ARRAY[NULL,NULL]::bigint[], NULL, 100"},
	} {
		p := generic(c.setup, c.sql, c.args)
		checkBatchPlan(t, c.name, p)
	}
}

// checkBatchPlan fails when a plan of a statement over a batch of tasks
// costs more than linearly in the batch's size, or reads the whole table:
//   - a scan of an index of tasks without an index condition (it reads the
//     whole table, whatever the batch);
//   - an index scan whose condition holds both a join key and the batch's
//     id = ANY array: PostgreSQL 15 sorts and steps through the array at
//     every rescan, so n lookups cost O(n²);
//   - a join filter on the batch's ids: the nested loop compares every
//     row of one side with every row of the other.
func checkBatchPlan(t *testing.T, name, p string) {
	t.Helper()
	lines := strings.Split(p, "\n")
	for i, l := range lines {
		switch {
		case strings.Contains(l, "Scan using tasks_") && strings.Contains(l, " on tasks ") &&
			(i+1 >= len(lines) || !strings.Contains(lines[i+1], "Index Cond")):
			t.Errorf("%s: a scan of an index of tasks without an index condition reads the whole table:\n%s", name, p)
		case strings.Contains(l, "Index Cond: ((id = ") && strings.Contains(l, "AND (id = ANY"):
			t.Errorf("%s: an index scan rescanned per row with the whole batch as its condition (O(n²)):\n%s", name, p)
		case strings.Contains(l, "Join Filter:") && strings.Contains(l, ".id = ") && strings.Contains(l, ".id)"):
			t.Errorf("%s: a nested loop compares the batch's ids pairwise (O(n²)):\n%s", name, p)
		default:
			continue
		}
		return
	}
}

// genericPlan is the cached generic plan of sql (EXPLAIN EXECUTE with args,
// SQL literals) in a transaction that ran setup first.
func genericPlan(t *testing.T, s *Store, setup, sql, args string) string {
	t.Helper()
	ctx := context.Background()
	var out []string
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, setup); err != nil {
				return err
			}
			if _, err := tx.Prepare(ctx, "generic_plan", sql); err != nil {
				return err
			}
			defer tx.Conn().Deallocate(ctx, "generic_plan")
			exec := "EXPLAIN EXECUTE generic_plan"
			if args != "" {
				exec += "(" + args + ")"
			}
			rows, err := tx.Query(ctx, exec)
			if err != nil {
				return err
			}
			out, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, "\n")
}
