package storetest

import (
	"testing"

	"github.com/nornq/norn"
)

// exerciseFlow checks flow control: concurrency keys, queue limits, rate
// limits and fair claiming.
func exerciseFlow(t *testing.T, setup setupFunc) {
	t.Run("Flow", func(t *testing.T) {
		t.Parallel()

		t.Run("ConcurrencyKeyIsStoredAndReturned", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			got := b.submit(norn.NewTask{ID: "k", Queue: "q", ConcurrencyKey: "tenant/é 1"},
				norn.NewTask{ID: "n", Queue: "q"})
			if got[0].ConcurrencyKey != "tenant/é 1" || got[1].ConcurrencyKey != "" {
				t.Fatalf("submit results: %q %q", got[0].ConcurrencyKey, got[1].ConcurrencyKey)
			}
			if g := b.get("k"); g.ConcurrencyKey != "tenant/é 1" {
				t.Fatalf("Get: concurrency key %q", g.ConcurrencyKey)
			}
			c := b.claimID("w", "k", "q")
			if c.ConcurrencyKey != "tenant/é 1" {
				t.Fatalf("claimed: concurrency key %q", c.ConcurrencyKey)
			}
			for _, tk := range b.listAll(norn.Query{Summary: true}) {
				want := map[string]string{"k": "tenant/é 1", "n": ""}[tk.ID]
				if tk.ConcurrencyKey != want {
					t.Fatalf("summary list: %s has key %q, want %q", tk.ID, tk.ConcurrencyKey, want)
				}
			}
		})
	})
}
