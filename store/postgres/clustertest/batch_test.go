package clustertest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
)

// TestBatchCallbacksOnceUnderKills: 40 sealed batches of 50 members each;
// workers on three nodes complete members of the same batches at the same
// moments, while two nodes are killed with SIGKILL one after the other and
// PostgreSQL restarts. Every batch ends done with both callbacks submitted
// exactly once: one task per callback id, never written again, counting
// all 50 members.
func TestBatchCallbacksOnceUnderKills(t *testing.T) {
	ctx := context.Background()
	pg := pgtest.NewCluster(t)
	const schema = "batches"
	const batches, members = 40, 50
	nodes := startNodes(t, 3, pg.URL(), schema)
	tbl := pgx.Identifier{schema}.Sanitize()

	for b := range batches {
		nb := norn.NewBatch{ID: fmt.Sprintf("b%02d", b), Seal: true,
			OnComplete: &norn.NewTask{Queue: "cb"}, OnSuccess: &norn.NewTask{Queue: "cb", Spec: []byte(`{"all":"completed"}`)}}
		for range members {
			nb.Tasks = append(nb.Tasks, norn.NewTask{Queue: "q", Timeout: norn.Duration(3 * time.Second)})
		}
		if _, err := nodes[2].c.CreateBatch(ctx, nb); err != nil {
			t.Fatal(err)
		}
	}
	p := &pool{nodes: nodes}
	ws := &workStats{}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker(lctx, p, w%3, fmt.Sprintf("w%d", w), 5, ws)
		}()
	}
	defer func() { stop(); wg.Wait() }()
	// A connection of its own per look: the restart ends every session.
	done := func() (int64, error) {
		c, err := pgx.Connect(ctx, pg.URL())
		if err != nil {
			return 0, nil // restarting
		}
		defer c.Close(ctx)
		n, err := count(ctx, c, "SELECT count(*) FROM "+tbl+".batches WHERE state = 'done' AND NOT waiting")
		if err != nil {
			return 0, nil
		}
		return n, nil
	}
	for i, at := range []int64{5, 15} {
		waitFor(t, "batches done", 120*time.Second, func() (bool, error) {
			n, err := done()
			return n >= at, err
		})
		p.dead.Store(nodes[i].name, true)
		nodes[i].kill()
		t.Logf("killed %s after %d batches done", nodes[i].name, at)
	}
	waitFor(t, "batches done", 120*time.Second, func() (bool, error) {
		n, err := done()
		return n >= 25, err
	})
	if err := pg.Restart("immediate"); err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Logf("PostgreSQL restarted")
	waitFor(t, "every batch done", 180*time.Second, func() (bool, error) {
		n, err := done()
		return n == batches, err
	})
	stop()
	wg.Wait()

	for b := range batches {
		id := fmt.Sprintf("b%02d", b)
		got, err := nodes[2].c.GetBatch(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got.CompleteTask != norn.BatchCallbackID(id, norn.CallbackComplete) || got.SuccessTask != norn.BatchCallbackID(id, norn.CallbackSuccess) ||
			got.Final[norn.StatusCompleted] != members {
			t.Errorf("batch %s: %+v", id, got)
		}
	}
	// A callback fired twice would be a second task, or (its id being
	// taken) a write to the first one: neither happened.
	conn := connect(t, pg.URL())
	rows, err := conn.Query(ctx, "SELECT id, version, labels->>'norn.completed' FROM "+tbl+".tasks WHERE queue = 'cb'")
	if err != nil {
		t.Fatal(err)
	}
	var (
		id, completed string
		version       int64
	)
	n := 0
	if _, err := pgx.ForEachRow(rows, []any{&id, &version, &completed}, func() error {
		n++
		if version != 1 || completed != fmt.Sprint(members) {
			t.Errorf("callback %s: version %d, norn.completed %s", id, version, completed)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 2*batches {
		t.Errorf("%d callbacks, want %d", n, 2*batches)
	}
	for _, err := range ws.other {
		t.Errorf("worker error: %v", err)
	}
	t.Logf("%d batches done, %d callbacks, %d completions acknowledged", batches, n, ws.completed.Load())
}
