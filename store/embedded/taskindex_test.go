package embedded

import (
	"slices"
	"testing"
)

func TestTaskIndex(t *testing.T) {
	x := newTaskIndex()
	a := &task{id: "0190b2f4-7a3c-7d2e-8f00-000000000001"}
	b := &task{id: "0190b2f4-7a3c-7d2e-8f00-000000000002"}
	c := &task{id: "my-own-id"}
	// Not canonical (upper case): found by its string, not confused with a.
	d := &task{id: "0190B2F4-7A3C-7D2E-8F00-000000000001"}
	for _, tk := range []*task{a, b, c, d} {
		if x.get(tk.id) != nil {
			t.Fatalf("get(%q) before put: want nil", tk.id)
		}
		x.put(tk)
	}
	for _, tk := range []*task{a, b, c, d} {
		if got := x.get(tk.id); got != tk {
			t.Fatalf("get(%q) = %v, want %v", tk.id, got, tk)
		}
	}
	if x.len() != 4 {
		t.Fatalf("len = %d, want 4", x.len())
	}
	// getClaimed finds claimed and other tasks alike.
	x.noteClaimed(a)
	x.noteClaimed(c) // not a UUID: found by its string
	for _, tk := range []*task{a, b, c, d} {
		if got := x.getClaimed(tk.id); got != tk {
			t.Fatalf("getClaimed(%q) = %v, want %v", tk.id, got, tk)
		}
	}
	// An id whose entry in the table of claims names another task is
	// still found (the table holds hints, checked against the slot).
	e := &task{id: "0190b2f4-7a3c-7d2e-8f00-000000001001"} // a's entry: the same low bits mod the table size
	x.put(e)
	x.noteClaimed(e)
	if x.getClaimed(a.id) != a || x.getClaimed(e.id) != e {
		t.Fatal("getClaimed confused two tasks sharing an entry")
	}
	x.del(e)
	// A deleted claimed task's slot reused by another task: the stale
	// hint is not taken for it.
	x.noteClaimed(b)
	x.del(b)
	f := &task{id: "0190b2f4-7a3c-7d2e-8f00-0000000000ff"}
	x.put(f) // takes b's slot
	if f.slot != b.slot || x.getClaimed(b.id) != nil || x.getClaimed(f.id) != f {
		t.Fatalf("after b's slot went to f: getClaimed(b) = %v, getClaimed(f) = %v", x.getClaimed(b.id), x.getClaimed(f.id))
	}
	x.del(f)
	x.del(c)
	x.del(c) // again: a no-op
	if x.get(b.id) != nil || x.get(c.id) != nil {
		t.Fatal("deleted tasks still found")
	}
	if x.len() != 2 {
		t.Fatalf("len = %d, want 2", x.len())
	}
	// A deleted task's replacement under the same id is not removed by a
	// stale del of the old one.
	b2 := &task{id: b.id}
	x.put(b2)
	x.del(b)
	if x.get(b.id) != b2 {
		t.Fatal("del of a replaced task removed its successor")
	}
	var all []string
	for tk := range x.all() {
		all = append(all, tk.id)
	}
	slices.Sort(all)
	want := []string{d.id, a.id, b.id}
	slices.Sort(want)
	if !slices.Equal(all, want) {
		t.Fatalf("all = %v, want %v", all, want)
	}
	// Deleting while iterating visits every task once.
	n := 0
	for tk := range x.all() {
		x.del(tk)
		n++
	}
	if n != 3 || x.len() != 0 || len(x.slots) != 0 {
		t.Fatalf("deleting all: visited %d, len %d, slots %d", n, x.len(), len(x.slots))
	}
}
