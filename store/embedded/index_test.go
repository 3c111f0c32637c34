package embedded

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/uuid"
)

// The ready heap compares UUID ids as integers; that must order them
// exactly as comparing the strings does, and anything that is not a
// canonical lowercase UUID must fall back to the string.
func TestUUIDKeyOrdersLikeStrings(t *testing.T) {
	t.Parallel()
	ids := []string{
		"00000000-0000-0000-0000-000000000000",
		"ffffffff-ffff-ffff-ffff-ffffffffffff",
		"0193a1b2-c3d4-7e5f-8abc-def012345678",
		"0193a1b2-c3d4-7e5f-8abc-def012345679",
		"0193a1b2-c3d4-7e60-8abc-def012345678",
		"a193a1b2-c3d4-7e5f-8abc-def012345678",
		"9193a1b2-c3d4-7e5f-8abc-def012345678",
	}
	for i := 0; i < 50; i++ {
		ids = append(ids, uuid.Must(uuid.NewV7()).String(), uuid.NewString())
	}
	for _, a := range ids {
		ka, ok := uuidKey(a)
		if !ok {
			t.Fatalf("uuidKey(%q) not recognised", a)
		}
		u := uuid.MustParse(a)
		if want := [2]uint64{binary.BigEndian.Uint64(u[:8]), binary.BigEndian.Uint64(u[8:])}; ka != want {
			t.Fatalf("uuidKey(%q) = %x, want %x", a, ka, want)
		}
		for _, b := range ids {
			kb, _ := uuidKey(b)
			less := ka[0] < kb[0] || ka[0] == kb[0] && ka[1] < kb[1]
			if less != (a < b) {
				t.Fatalf("%q < %q: keys say %v, strings say %v", a, b, less, a < b)
			}
		}
	}
	for _, bad := range []string{"", "a", "0193A1B2-C3D4-7E5F-8ABC-DEF012345678", "0193a1b2xc3d4-7e5f-8abc-def012345678",
		"0193a1b2-c3d4-7e5f-8abc-def01234567g", "0193a1b2-c3d4-7e5f-8abc-def0123456789",
		"0193a1b2-c3d4-7e5f-8abc-def01234567\x00", "g193a1b2-c3d4-7e5f-8abc-def012345678", "0193a1b2-c3d4-7e5f-8abc-def01234567F"} {
		if _, ok := uuidKey(bad); ok {
			t.Errorf("uuidKey(%q) accepted", bad)
		}
	}
}

// Mixed ids (a UUID and a client id with the same priority and ready time)
// still come out in id order.
func TestReadyHeapMixedIDs(t *testing.T) {
	t.Parallel()
	ids := []string{"zz", "0193a1b2-c3d4-7e5f-8abc-def012345678", "0193a1b2-c3d4-7e5f-8abc-def012345677", "A", "m"}
	var h readyHeap
	for _, id := range ids {
		tk := &task{id: id, heapIdx: -1}
		h = append(h, newReadyEnt(tk))
	}
	var got []string
	for len(h) > 0 {
		best := 0
		for i := range h {
			if h.less(i, best) {
				best = i
			}
		}
		got = append(got, h[best].t.id)
		h = append(h[:best], h[best+1:]...)
	}
	want := []string{"0193a1b2-c3d4-7e5f-8abc-def012345677", "0193a1b2-c3d4-7e5f-8abc-def012345678", "A", "m", "zz"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("order %v, want %v", got, want)
		}
	}
}

// The hand-written heap operations keep the heap order and every task's
// heapIdx through random pushes, removals and key changes.
func TestReadyHeapOps(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	var h readyHeap
	var live []*task
	check := func(step int) {
		for i := range h {
			if int(h[i].t.heapIdx) != i {
				t.Fatalf("step %d: entry %d has heapIdx %d", step, i, h[i].t.heapIdx)
			}
			if p := (i - 1) / 2; i > 0 && h.less(i, p) {
				t.Fatalf("step %d: entry %d sorts before its parent %d", step, i, p)
			}
		}
	}
	for step := 0; step < 3000; step++ {
		switch op := rng.IntN(4); {
		case op <= 1 || len(live) == 0:
			tk := &task{id: fmt.Sprintf("t%05d", step), heapIdx: -1}
			tk.st.priority = uint32(rng.IntN(3))
			tk.st.readyAt = int64(rng.IntN(5))
			h.push(newReadyEnt(tk))
			live = append(live, tk)
		case op == 2:
			k := rng.IntN(len(live))
			h.remove(int(live[k].heapIdx))
			if live[k].heapIdx != -1 {
				t.Fatalf("removed task keeps heapIdx %d", live[k].heapIdx)
			}
			live = append(live[:k], live[k+1:]...)
		default:
			tk := live[rng.IntN(len(live))]
			e := &h[tk.heapIdx]
			e.priority = uint32(rng.IntN(3))
			h.fix(int(tk.heapIdx))
		}
		check(step)
	}
	// Popping everything yields the claim order.
	for len(h) > 0 {
		top := h[0]
		h.remove(0)
		if len(h) > 0 {
			h2 := readyHeap{top, h[0]}
			if h2.less(1, 0) {
				t.Fatalf("popped %q before %q", top.t.id, h[0].t.id)
			}
		}
	}
}

// TestReadyQueueOps drives a readyQueue through random pushes (mostly in
// claim order, as tasks usually become ready, sometimes out of it),
// removals from anywhere, key changes and takes from the front, and
// checks after every step that every task finds its entry, the run keeps
// its order with live ends, and first is the first of all live tasks in
// claim order.
func TestReadyQueueOps(t *testing.T) {
	t.Parallel()
	for _, ids := range []string{"uuid", "strings"} {
		rng := rand.New(rand.NewPCG(7, 8))
		var r readyQueue
		var live []*task
		clock := int64(0)
		n := 0
		newTask := func() *task {
			n++
			id := fmt.Sprintf("t%06d", n)
			if ids == "uuid" {
				id = fmt.Sprintf("00000000-0000-7000-8000-%012d", n)
			}
			tk := &task{id: id, heapIdx: -1}
			if rng.IntN(10) == 0 {
				tk.st.priority = uint32(rng.IntN(3)) // out of order
				tk.st.readyAt = clock - int64(rng.IntN(5))
			} else {
				tk.st.readyAt = clock
			}
			clock += int64(rng.IntN(2))
			return tk
		}
		check := func(step int) {
			if r.len() != len(live) {
				t.Fatalf("%s step %d: len %d, %d live tasks", ids, step, r.len(), len(live))
			}
			var best *task
			for _, tk := range live {
				if e := r.entry(tk); e.t != tk || e.dead {
					t.Fatalf("%s step %d: task %s finds the entry of %v (dead %v)", ids, step, tk.id, e.t, e.dead)
				}
				if best == nil || entLess(r.entry(tk), r.entry(best)) {
					best = tk
				}
			}
			if best != nil && r.first().t != best {
				t.Fatalf("%s step %d: first is %s, want %s", ids, step, r.first().t.id, best.id)
			}
			if r.runBase+len(r.run) > maxRunPos {
				t.Fatalf("%s step %d: run positions beyond %d", ids, step, maxRunPos)
			}
			if r.live > 0 && (r.run[r.front].dead || r.run[len(r.run)-1].dead) {
				t.Fatalf("%s step %d: the run has a dead end", ids, step)
			}
			for i := r.front + 1; i < len(r.run); i++ {
				if r.run[i].dead || r.run[i-1].dead {
					continue
				}
				if entLess(&r.run[i], &r.run[i-1]) {
					t.Fatalf("%s step %d: run out of order at %d", ids, step, i)
				}
			}
		}
		drop := func(k int) {
			live = append(live[:k], live[k+1:]...)
		}
		for step := 0; step < 20000; step++ {
			if step == 10000 {
				// Near the end of the numbering, a run that keeps growing
				// renumbers itself.
				r.renumber()
				r.runBase = maxRunPos - 3000
				for i := range r.run {
					if !r.run[i].dead {
						r.run[i].t.heapIdx = int32(-2 - (r.runBase + i))
					}
				}
				for range 5000 {
					tk := newTask()
					tk.st.priority, tk.st.readyAt = 0, clock+1 // in order
					r.push(newReadyEnt(tk))
					live = append(live, tk)
				}
				check(step)
			}
			switch op := rng.IntN(10); {
			case op < 4 || len(live) == 0:
				tk := newTask()
				r.push(newReadyEnt(tk))
				live = append(live, tk)
			case op < 7:
				tk := r.first().t
				r.remove(tk)
				if tk.heapIdx != -1 {
					t.Fatalf("taken task keeps heapIdx %d", tk.heapIdx)
				}
				drop(slices.Index(live, tk))
			case op < 9:
				k := rng.IntN(len(live))
				r.remove(live[k])
				drop(k)
			default:
				tk := live[rng.IntN(len(live))]
				e := r.entry(tk)
				e.priority = uint32(rng.IntN(3))
				e.readyAt = clock - int64(rng.IntN(10))
				r.fix(tk)
			}
			check(step)
		}
		// Loading sorts: the same tasks come out in the same order.
		var es []readyEnt
		for _, tk := range live {
			es = append(es, *r.entry(tk))
		}
		var want []*task
		for r.len() > 0 {
			tk := r.first().t
			r.remove(tk)
			want = append(want, tk)
		}
		rng.Shuffle(len(es), func(i, j int) { es[i], es[j] = es[j], es[i] })
		r.load(es)
		for i, tk := range want {
			if got := r.first().t; got != tk {
				t.Fatalf("%s: after load, entry %d is %s, want %s", ids, i, got.id, tk.id)
			}
			r.remove(tk)
		}
	}
}
