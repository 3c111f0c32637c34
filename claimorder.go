package norn

import (
	"cmp"
	"math"
	"slices"
)

// ClaimOrder is the order in which one claim of r tries its queues: r's
// own order without weights; with weights, a random order drawn by
// weight (each queue's key is u^(1/w) for a uniform u, highest first), so
// a queue comes first with a probability proportional to its weight and
// every queue with work still gets its turn. rnd returns uniform floats in
// [0, 1); stores pass math/rand's, tests a fixed sequence.
func (r *ClaimRequest) ClaimOrder(rnd func() float64) []string {
	if len(r.Weights) == 0 || len(r.Queues) < 2 {
		return r.Queues
	}
	type keyed struct {
		q   string
		key float64
	}
	ks := make([]keyed, len(r.Queues))
	for i, q := range r.Queues {
		w := r.Weights[q]
		if w <= 0 {
			w = 1
		}
		ks[i] = keyed{q, math.Pow(rnd(), 1/float64(w))}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int { return cmp.Compare(b.key, a.key) })
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.q
	}
	return out
}
