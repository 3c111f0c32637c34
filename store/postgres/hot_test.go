package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/await"
	"github.com/nornq/norn/store/storetest"
)

// TestCompletionIsHOT: no index names a column that a completion from a
// ready row changes (the ist column), so that completion writes its new
// version on the task's page and no index entry. An index naming status,
// ready_batch or ended_at again would make every such completion a
// non-HOT update, and this test fail. (The last rows of a page may not
// fit: the completed version is a little longer.)
func TestCompletionIsHOT(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	const n = 400
	nts := make([]norn.NewTask, n)
	for i := range nts {
		nts[i] = norn.NewTask{Queue: "q", Spec: []byte(`{"job":"hot"}`)}
	}
	if _, err := s.Submit(ctx, nts...); err != nil {
		t.Fatal(err)
	}
	stat := func() (upd, hot int64) {
		err := s.withConn(ctx, func(conn *pgx.Conn) error {
			return conn.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
WHERE schemaname = $1 AND relname = 'tasks'`, s.cfg.Schema).Scan(&upd, &hot)
		})
		if err != nil {
			t.Fatal(err)
		}
		return upd, hot
	}
	upd0, hot0 := stat()
	tasks, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: n})
	if err != nil || len(tasks) != n {
		t.Fatalf("claim: %d tasks, %v", len(tasks), err)
	}
	ops := make([]norn.LeaseOp, n)
	for i, tk := range tasks {
		ops[i] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: tk.ID, Worker: "w", Lease: tk.Lease}}
	}
	res, err := s.LeaseBatch(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// Statistics reach the shared counters when the writing session goes
	// idle (within about ten seconds).
	await.Check(t, time.Minute, "the completions' statistics", func() (string, error) {
		upd, hot := stat()
		if upd-upd0 >= n && (hot-hot0)*10 >= (upd-upd0)*8 {
			return "", nil
		}
		return fmt.Sprintf("%d of %d updates were HOT, want at least 80%% of %d completions", hot-hot0, upd-upd0, n), nil
	})
}

// TestEndedLogRetention: plain completed tasks are in no index of tasks;
// retention finds them through ended_log, deletes each when its own
// queue's retention has passed, and drops the log rows it has read, so
// the log does not outlive the tasks.
func TestEndedLogRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := storetest.NewFakeClock()
	s := openTest(t, clock, func(c *Config) { c.DisableMonitor = true })
	short, long := norn.Duration(time.Hour), norn.Duration(3*time.Hour)
	for q, d := range map[string]norn.Duration{"short": short, "long": long} {
		if _, err := s.UpdateQueue(ctx, q, norn.QueueUpdate{Retention: &norn.Retention{Completed: d, Aborted: d, Cancelled: d}}); err != nil {
			t.Fatal(err)
		}
	}
	work := func(q string, n int) {
		t.Helper()
		nts := make([]norn.NewTask, n)
		for i := range nts {
			nts[i] = norn.NewTask{Queue: q}
		}
		if _, err := s.Submit(ctx, nts...); err != nil {
			t.Fatal(err)
		}
		tasks, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{q}, N: n})
		if err != nil || len(tasks) != n {
			t.Fatalf("claim %s: %d tasks, %v", q, len(tasks), err)
		}
		ops := make([]norn.LeaseOp, n)
		for i, tk := range tasks {
			ops[i] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: tk.ID, Worker: "w", Lease: tk.Lease}}
		}
		if _, err := s.LeaseBatch(ctx, ops); err != nil {
			t.Fatal(err)
		}
	}
	count := func(sql string) (n int) {
		t.Helper()
		if err := s.withConn(ctx, func(conn *pgx.Conn) error { return conn.QueryRow(ctx, s.q(sql)).Scan(&n) }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	state := func() string {
		return fmt.Sprintf("short %d, long %d tasks, %d log rows",
			count(`SELECT count(*) FROM {s}.tasks WHERE queue = 'short'`),
			count(`SELECT count(*) FROM {s}.tasks WHERE queue = 'long'`), count(`SELECT count(*) FROM {s}.ended_log`))
	}
	// Two log rows of 1,000 for short: a sweep pass takes about 1,000
	// tasks' rows at a time, so this takes two passes.
	work("short", 1000)
	work("short", 1000)
	work("long", 20)
	if got := count(`SELECT count(*) FROM {s}.tasks WHERE ended_idx IS NOT NULL OR ist IS NOT NULL`); got != 0 {
		t.Fatalf("%d plain completed tasks are in a status index", got)
	}
	for _, c := range []struct {
		advance time.Duration
		want    string
	}{
		{59 * time.Minute, "short 2000, long 20 tasks, 3 log rows"},
		{2 * time.Minute, "short 0, long 20 tasks, 1 log rows"},
		{2 * time.Hour, "short 0, long 0 tasks, 0 log rows"},
	} {
		clock.Advance(c.advance)
		if _, err := s.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		if got := state(); got != c.want {
			t.Fatalf("after %v more: %s, want %s", c.advance, got, c.want)
		}
	}
}
