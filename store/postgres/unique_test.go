package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
)

// TestUniqueKeyAcrossStoreInstances: several stores on one database (the
// nodes of a cluster) submit the same unique keys at once, singly, in
// batches and in transactions; each key ends up with exactly one task and
// every submitter is answered with it. The "window" keys had a task that
// ended just before, which every submitter must see through unique_for
// whatever node ended it.
func TestUniqueKeyAcrossStoreInstances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	const nodes, perNode = 4, 6
	stores := make([]*Store, nodes)
	for i := range stores {
		s, err := Open(ctx, Config{URL: url, Schema: schema, Migrate: true, DisableMonitor: true})
		if err != nil {
			t.Fatalf("Open node %d: %v", i, err)
		}
		t.Cleanup(func() { s.Close() })
		stores[i] = s
	}
	// A task of key "window" that ended a moment ago on node 0.
	if _, err := stores[0].Submit(ctx, norn.NewTask{ID: "ended", Queue: "q", UniqueKey: "window"}); err != nil {
		t.Fatal(err)
	}
	if _, err := stores[0].Cancel(ctx, "ended"); err != nil {
		t.Fatal(err)
	}
	keys := []norn.NewTask{
		{Queue: "q", UniqueKey: "live"},
		{Queue: "q", UniqueKey: "window", UniqueFor: norn.Duration(time.Hour)},
		{Queue: "q", UniqueKey: "fresh", UniqueFor: norn.Duration(time.Hour)},
	}
	type answer struct {
		key       string
		id        string
		duplicate bool
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
	)
	start := make(chan struct{})
	for n, s := range stores {
		for g := range perNode {
			wg.Go(func() {
				<-start
				var res []norn.Submitted
				var err error
				switch g % 3 {
				case 0:
					res, err = s.Submit(ctx, keys...)
				case 1:
					var tr *norn.TxnResult
					if tr, err = s.Transact(ctx, norn.Txn{Submit: keys}); err == nil {
						res = tr.Submitted
					}
				default:
					err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
						var err error
						res, err = s.SubmitTx(ctx, tx, keys...)
						return err
					})
				}
				if err != nil {
					t.Errorf("node %d submitter %d: %v", n, g, err)
					return
				}
				mu.Lock()
				defer mu.Unlock()
				for i, r := range res {
					answers = append(answers, answer{keys[i].UniqueKey, r.Task.ID, r.Duplicate})
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		return
	}
	for _, k := range keys {
		ids := map[string]bool{}
		created := 0
		for _, a := range answers {
			if a.key == k.UniqueKey {
				ids[a.id] = true
				if !a.duplicate {
					created++
				}
			}
		}
		wantCreated := 1
		if k.UniqueKey == "window" {
			wantCreated = 0
		}
		if len(ids) != 1 || created != wantCreated {
			t.Errorf("key %q: answered with tasks %v, %d created; want one task, %d created", k.UniqueKey, ids, created, wantCreated)
		}
		n, err := stores[1].Count(ctx, norn.Filter{UniqueKey: k.UniqueKey})
		if err != nil || n != 1 {
			t.Errorf("key %q: %d tasks stored (%v), want 1", k.UniqueKey, n, err)
		}
	}
}

// TestUniqueIndexGuardsEveryWriter: the partial unique index, not only the
// submit path, keeps one live task per queue and key, so a writer that
// does not go through Submit (here plain SQL) cannot make a second one.
func TestUniqueIndexGuardsEveryWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	if _, err := s.Submit(ctx, norn.NewTask{ID: "a", Queue: "q", UniqueKey: "k"}, norn.NewTask{ID: "b", Queue: "q", UniqueKey: "k2"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.pool.Exec(ctx, s.q(`UPDATE {s}.tasks SET unique_key = 'k' WHERE id = 'b'`))
	if err == nil {
		t.Fatal("a second live task with key k was accepted")
	}
	if _, err := s.Cancel(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, s.q(`UPDATE {s}.tasks SET unique_key = 'k' WHERE id = 'b'`)); err != nil {
		t.Fatalf("once a ended, b may take its key: %v", err)
	}
}
