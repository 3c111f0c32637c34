package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/await"
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
