package storetest

import (
	"fmt"
	"testing"

	"github.com/nornq/norn"
)

// exerciseClaimWeights: weighted queues share claims by weight while both
// have work, and a light queue is not starved.
func exerciseClaimWeights(t *testing.T, setup setupFunc) {
	t.Run("ClaimWeights", func(t *testing.T) {
		t.Parallel()

		t.Run("ShareClaimsByWeight", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			const each, claims = 300, 200
			var nts []norn.NewTask
			for i := range each {
				nts = append(nts, norn.NewTask{ID: fmt.Sprintf("h%03d", i), Queue: "heavy"}, norn.NewTask{ID: fmt.Sprintf("l%03d", i), Queue: "light"})
			}
			b.submitMany(nts)
			got := map[string]int{}
			for range claims {
				ts := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"light", "heavy"}, Weights: map[string]int{"heavy": 3}})
				if len(ts) != 1 {
					t.Fatalf("claimed %d tasks, want 1", len(ts))
				}
				got[ts[0].Queue]++
			}
			// heavy first 3 claims in 4: 150 of 200 expected, standard
			// deviation 6.1; light, listed first, is not preferred.
			if got["heavy"] < 120 || got["heavy"] > 180 {
				t.Fatalf("heavy got %d of %d claims, light %d; want about 150", got["heavy"], claims, got["light"])
			}
		})

		t.Run("AQueueWithoutWorkLeavesItsShareToTheOthers", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.submit(norn.NewTask{ID: "only", Queue: "light"})
			ts := b.claimReq(norn.ClaimRequest{Worker: "w", Queues: []string{"heavy", "light"}, Weights: map[string]int{"heavy": 1000}, N: 5})
			if len(ts) != 1 || ts[0].ID != "only" {
				t.Fatalf("claimed %v, want the light queue's task", ids(ts))
			}
		})

		t.Run("BadWeightsAreRefused", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submit(norn.NewTask{ID: "a", Queue: "q"})
			before := b.snapshot()
			_, err := s.Claim(b.ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, Weights: map[string]int{"other": 2}})
			wantField(t, "a weight for a queue not claimed", err, norn.ErrInvalidArgument, `weights["other"]`)
			_, err = s.Claim(b.ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, Weights: map[string]int{"q": 0}})
			wantField(t, "a zero weight", err, norn.ErrInvalidArgument, `weights["q"]`)
			b.unchanged("refused claims", before)
		})
	})
}
