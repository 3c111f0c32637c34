package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
)

// TestFrozenTransactionDoesNotStallOtherNodes: a node frozen (SIGSTOP, a
// paused VM) in the middle of a limited claim's transaction holds the
// queue's lock; another node's claim of that queue must go through once
// the database ends the frozen session, not wait for the node to resume.
func TestFrozenTransactionDoesNotStallOtherNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	open := func(migrate bool) *Store {
		s, err := Open(ctx, Config{URL: url, Schema: schema, Migrate: migrate, DisableMonitor: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	frozen, other := open(true), open(false)
	limit := 100
	if _, err := frozen.UpdateQueue(ctx, "lq", norn.QueueUpdate{MaxRunning: &limit}); err != nil {
		t.Fatal(err)
	}
	if _, err := frozen.Submit(ctx, norn.NewTask{ID: "t1", Queue: "lq"}); err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	resume := make(chan struct{})
	defer close(resume)
	go func() {
		_ = frozen.withTx(ctx, func(tx pgx.Tx) error {
			// The first statement of claimLimited; then the node stops.
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, frozen.channel+"/flow/lq"); err != nil {
				t.Error(err)
			}
			close(held)
			<-resume
			return nil
		})
	}()
	<-held
	// Long enough for the session limit to end the frozen transaction, far
	// shorter than the freeze (which lasts until the test ends).
	cctx, cancel := context.WithTimeout(ctx, idleInTxLimit+30*time.Second)
	defer cancel()
	got, err := other.Claim(cctx, norn.ClaimRequest{Worker: "w", Queues: []string{"lq"}})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim on another node while one is frozen in a transaction: %d tasks, %v", len(got), err)
	}
}
