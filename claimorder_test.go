package norn

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestClaimOrder(t *testing.T) {
	t.Parallel()
	strict := ClaimRequest{Queues: []string{"a", "b", "c"}}
	if got := strict.ClaimOrder(rand.Float64); !slices.Equal(got, strict.Queues) {
		t.Fatalf("without weights: %v", got)
	}
	r := ClaimRequest{Queues: []string{"emails", "reports", "misc"}, Weights: map[string]int{"emails": 6, "reports": 3}}
	rng := rand.New(rand.NewPCG(1, 2))
	first := map[string]int{}
	const n = 10000
	for range n {
		o := r.ClaimOrder(rng.Float64)
		if len(o) != 3 || !slices.Contains(o, "emails") || !slices.Contains(o, "reports") || !slices.Contains(o, "misc") {
			t.Fatalf("order %v is not a permutation", o)
		}
		first[o[0]]++
	}
	// Weights 6, 3 and 1 (misc has none): first 60%, 30% and 10% of the
	// time; 10,000 draws stay within 2 points (over 6 standard deviations).
	for q, want := range map[string]float64{"emails": 0.6, "reports": 0.3, "misc": 0.1} {
		if got := float64(first[q]) / n; got < want-0.02 || got > want+0.02 {
			t.Errorf("%s first %.3f of claims, want %.2f", q, got, want)
		}
	}
}

func TestClaimRequestWeightsValidate(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		weights map[string]int
		field   string
	}{
		{"fine", map[string]int{"a": 3, "b": 1}, ""},
		{"a queue not claimed", map[string]int{"c": 1}, `weights["c"]`},
		{"zero", map[string]int{"a": 0}, `weights["a"]`},
		{"too heavy", map[string]int{"a": MaxWeight + 1}, `weights["a"]`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ClaimRequest{Worker: "w", Queues: []string{"a", "b"}, Weights: c.weights}
			err := r.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if ne, ok := err.(*Error); !ok || ne.Field != c.field {
				t.Fatalf("err %v, want one naming %s", err, c.field)
			}
		})
	}
}
