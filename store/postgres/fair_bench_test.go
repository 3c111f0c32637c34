package postgres

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/nornq/norn"
)

// BenchmarkFairClaim is the claim of a batch of 100 (and their
// completion) from a queue without and with fair_by concurrency_key, in
// two shapes: one key holding a backlog of 10,000 tasks (100,000 with
// NORN_BENCH_BIG=1) plus ten small keys with a task each — the fairness
// bench's shape — and 1,000 keys with 20 tasks each, topped up between
// iterations (untimed). A fair claim reads O(keys + N) rows, so it must
// cost about the same with any backlog behind the large key.
func BenchmarkFairClaim(b *testing.B) {
	ctx := context.Background()
	big := 10_000
	if os.Getenv("NORN_BENCH_BIG") != "" {
		big = 100_000
	}
	keyed := func(k int, key string) []norn.NewTask {
		nts := make([]norn.NewTask, k)
		for i := range nts {
			nts[i] = norn.NewTask{Queue: "q", Spec: spec200, ConcurrencyKey: key}
		}
		return nts
	}
	shapes := []struct {
		name        string
		fill, topUp func(s *Store, claimed []*norn.Task) error
	}{
		{fmt.Sprintf("backlog=%d", big), func(s *Store, _ []*norn.Task) error {
			for left := big; left > 0; left -= 1000 {
				if _, err := s.Submit(ctx, keyed(min(left, 1000), "big")...); err != nil {
					return err
				}
			}
			return nil
		}, func(s *Store, claimed []*norn.Task) error {
			// Keep the backlog's size: put back what the last claim took
			// of the large key, and one task for each small key.
			nts := keyed(max(len(claimed)-10, 0), "big")
			for k := range 10 {
				nts = append(nts, keyed(1, fmt.Sprintf("small-%d", k))...)
			}
			_, err := s.Submit(ctx, nts...)
			return err
		}},
		{"keys=1000", func(s *Store, _ []*norn.Task) error {
			var nts []norn.NewTask
			for k := range 1000 {
				nts = append(nts, keyed(20, fmt.Sprintf("k%d", k))...)
			}
			for len(nts) > 0 {
				n := min(len(nts), 1000)
				if _, err := s.Submit(ctx, nts[:n]...); err != nil {
					return err
				}
				nts = nts[n:]
			}
			return nil
		}, func(s *Store, claimed []*norn.Task) error {
			nts := make([]norn.NewTask, 0, len(claimed))
			for _, t := range claimed {
				nts = append(nts, keyed(1, t.ConcurrencyKey)...)
			}
			_, err := s.Submit(ctx, nts...)
			return err
		}},
	}
	for _, shape := range shapes {
		for _, fair := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/fair=%v", shape.name, fair), func(b *testing.B) {
				s := openTest(b, nil, func(c *Config) { c.DisableMonitor = true })
				if fair {
					by := norn.FairByConcurrencyKey
					if _, err := s.UpdateQueue(ctx, "q", norn.QueueUpdate{FairBy: &by}); err != nil {
						b.Fatal(err)
					}
				}
				if err := shape.fill(s, nil); err != nil {
					b.Fatal(err)
				}
				var claimed []*norn.Task
				ops := make([]norn.LeaseOp, 0, 100)
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					if err := shape.topUp(s, claimed); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 100})
					if err != nil || len(ts) != 100 {
						b.Fatalf("claim: %d tasks, %v", len(ts), err)
					}
					ops = ops[:0]
					for _, t := range ts {
						ops = append(ops, norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: t.ID, Worker: "w", Lease: t.Lease}})
					}
					if _, err := s.LeaseBatch(ctx, ops); err != nil {
						b.Fatal(err)
					}
					claimed = ts
				}
			})
		}
	}
}
