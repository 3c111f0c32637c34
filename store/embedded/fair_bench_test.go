package embedded

import (
	"fmt"
	"testing"

	"github.com/nornq/norn"
)

// BenchmarkFairClaim is the claim of a batch of 100 (and their
// completion) from a queue where one key has the whole backlog (10,000
// tasks; 1,000,000 with NORN_BENCH_BIG=1) and ten small keys one task
// each, without and with fair_by: a fair claim must cost the same
// whatever the size of the large key's backlog.
func BenchmarkFairClaim(b *testing.B) {
	for _, n := range queuedSizes() {
		for _, fair := range []bool{false, true} {
			name := fmt.Sprintf("backlog=%d/fair=%v", n, fair)
			b.Run(name, func(b *testing.B) {
				s := benchStore(b, Opportunistic)
				if fair {
					by := norn.FairByConcurrencyKey
					if _, err := s.UpdateQueue(bg, "q", norn.QueueUpdate{FairBy: &by}); err != nil {
						b.Fatal(err)
					}
				}
				keyed := func(k int, key string) []norn.NewTask {
					nts := make([]norn.NewTask, k)
					for i := range nts {
						nts[i] = norn.NewTask{Queue: "q", Spec: spec200, ConcurrencyKey: key}
					}
					return nts
				}
				for left := n; left > 0; left -= 1000 {
					if _, err := s.Submit(bg, keyed(min(left, 1000), "big")...); err != nil {
						b.Fatal(err)
					}
				}
				ops := make([]norn.LeaseOp, 0, 100)
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					// Keep the backlog's size: put back what the last claim took,
					// and one task for each small key.
					if _, err := s.Submit(bg, keyed(90, "big")...); err != nil {
						b.Fatal(err)
					}
					for k := range 10 {
						if _, err := s.Submit(bg, keyed(1, fmt.Sprintf("small-%d", k))...); err != nil {
							b.Fatal(err)
						}
					}
					b.StartTimer()
					ts, err := s.Claim(bg, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 100})
					if err != nil || len(ts) != 100 {
						b.Fatalf("claim: %d tasks, %v", len(ts), err)
					}
					ops = ops[:0]
					for _, t := range ts {
						ops = append(ops, norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: t.ID, Worker: "w", Lease: t.Lease}})
					}
					if _, err := s.LeaseBatch(bg, ops); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
