package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/nornq/norn"
)

// TestGroupClaimsOnTwoNodes: group claims of one queue from two nodes,
// with plain claims beside them and a key limit: every answer holds one
// key's tasks, no task is claimed twice, no key ever runs more than its
// limit, and every task is claimed.
func TestGroupClaimsOnTwoNodes(t *testing.T) {
	ctx := context.Background()
	nodes := twoNodes(t)
	const keys, per, limit = 8, 30, 3
	if _, err := nodes[0].UpdateQueue(ctx, "g", norn.QueueUpdate{KeyLimit: ptr(limit)}); err != nil {
		t.Fatal(err)
	}
	var nts []norn.NewTask
	for i := range per {
		for k := range keys {
			nts = append(nts, norn.NewTask{ID: fmt.Sprintf("k%d-%02d", k, i), Queue: "g", ConcurrencyKey: fmt.Sprintf("k%d", k)})
		}
	}
	if _, err := nodes[0].Submit(ctx, nts...); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		claimed = map[string]bool{}
		running = map[string]int{}
	)
	var g group
	for w := range 4 {
		s := nodes[w%2]
		g.Go(func() error {
			for {
				req := norn.ClaimRequest{Worker: fmt.Sprintf("w%d", w), Queues: []string{"g"}, N: 5}
				if w%2 == 0 {
					req.GroupBy, req.Min = norn.FairByConcurrencyKey, 2
				}
				got, err := s.Claim(ctx, req)
				if err != nil {
					return err
				}
				mu.Lock()
				done := len(claimed) == keys*per
				for _, tk := range got {
					if claimed[tk.ID] {
						mu.Unlock()
						return fmt.Errorf("%s claimed twice", tk.ID)
					}
					claimed[tk.ID] = true
					running[tk.ConcurrencyKey]++
					if running[tk.ConcurrencyKey] > limit {
						mu.Unlock()
						return fmt.Errorf("key %s runs %d tasks, more than its limit %d", tk.ConcurrencyKey, running[tk.ConcurrencyKey], limit)
					}
					if req.GroupBy != "" && tk.ConcurrencyKey != got[0].ConcurrencyKey {
						mu.Unlock()
						return fmt.Errorf("a group claim answered keys %s and %s", got[0].ConcurrencyKey, tk.ConcurrencyKey)
					}
				}
				mu.Unlock()
				if done && len(got) == 0 {
					return nil
				}
				for _, tk := range got {
					mu.Lock()
					running[tk.ConcurrencyKey]-- // before the completion: the store may admit another once it commits
					mu.Unlock()
					if err := s.Complete(ctx, norn.LeaseRef{TaskID: tk.ID, Worker: req.Worker, Lease: tk.Lease}, nil); err != nil {
						return err
					}
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(claimed) != keys*per {
		t.Fatalf("%d of %d tasks claimed", len(claimed), keys*per)
	}
}
