package embedded

import "slices"

// readyQueue holds one key group's ready tasks in claim order (priority
// desc, ready time asc, id asc): a run of entries already in that order,
// taken from its front, and a heap for the entries that arrived out of
// order.
//
// Tasks mostly become ready in claim order (submitted now with the same
// priority, ids growing with time), and a run takes them, and gives them
// back, without moving any other entry. Popping the first of a million
// entries from a heap instead sifted an entry down twenty levels, and
// every level wrote the position of a task somewhere else in memory, a
// cache miss each: the largest item under the store lock in a 1M
// burn-down (docs/internals/embedded-performance.md).
//
// A task's heapIdx says where its entry is: >= 0 a position in the heap,
// -1 nowhere, <= -2 the run position runBase + i as -2 - (runBase + i).
// Run positions do not change when the run's front is consumed, so taking
// the first task writes only that task. An entry removed from the middle
// of the run stays as a dead entry (its keys kept, its task dropped) until
// the front passes it; the first and the last entry of the run are always
// live.
type readyQueue struct {
	heap    readyHeap
	run     []readyEnt // run[front:] is ordered; run[front] is live
	front   int
	runBase int // position of run[0] in the run's numbering
	live    int // live entries in the run
}

// maxRunPos bounds run positions (heapIdx is an int32); the run is
// renumbered from 0 before they get there.
const maxRunPos = 1 << 30

func (r *readyQueue) len() int { return len(r.heap) + r.live }

// first returns the first entry in claim order; the queue must not be
// empty.
func (r *readyQueue) first() *readyEnt {
	if r.live == 0 {
		return &r.heap[0]
	}
	if len(r.heap) == 0 || entLess(&r.run[r.front], &r.heap[0]) {
		return &r.run[r.front]
	}
	return &r.heap[0]
}

// push adds e: at the end of the run when it sorts after the run's last
// entry (or the run is empty), else into the heap.
func (r *readyQueue) push(e readyEnt) {
	if r.live > 0 && entLess(&e, &r.run[len(r.run)-1]) {
		r.heap.push(e)
		return
	}
	if r.live == 0 {
		r.run, r.front, r.runBase = r.run[:0], 0, 0
	} else if r.runBase+len(r.run) >= maxRunPos {
		r.renumber()
	}
	e.dead = false
	e.t.heapIdx = int32(-2 - (r.runBase + len(r.run)))
	r.run = append(r.run, e)
	r.live++
}

// entry returns t's entry; t must be in the queue.
func (r *readyQueue) entry(t *task) *readyEnt {
	if t.heapIdx >= 0 {
		return &r.heap[t.heapIdx]
	}
	return &r.run[int(-2-t.heapIdx)-r.runBase]
}

// remove takes t's entry out.
func (r *readyQueue) remove(t *task) {
	if t.heapIdx >= 0 {
		r.heap.remove(int(t.heapIdx))
		return
	}
	i := int(-2-t.heapIdx) - r.runBase
	t.heapIdx = -1
	r.live--
	if r.live == 0 {
		clear(r.run)
		r.run, r.front, r.runBase = r.run[:0], 0, 0
		return
	}
	r.run[i].dead = true
	r.run[i].t = nil // the task may be deleted
	if i == len(r.run)-1 {
		n := len(r.run)
		for r.run[n-1].dead {
			r.run[n-1] = readyEnt{}
			n--
		}
		r.run = r.run[:n]
	}
	if i != r.front {
		return
	}
	for r.run[r.front].dead {
		r.run[r.front] = readyEnt{}
		r.front++
	}
	if r.front >= 1024 && r.front > len(r.run)/2 {
		// Reuse the consumed front: shift the rest down, numbering
		// unchanged.
		n := copy(r.run, r.run[r.front:])
		clear(r.run[n:])
		r.runBase += r.front
		r.run, r.front = r.run[:n], 0
	}
}

// fix restores the order after t's entry changed its priority or ready time.
func (r *readyQueue) fix(t *task) {
	if t.heapIdx >= 0 {
		r.heap.fix(int(t.heapIdx))
		return
	}
	e := *r.entry(t)
	r.remove(t)
	r.push(e)
}

// renumber numbers the run from 0 again.
func (r *readyQueue) renumber() {
	n := copy(r.run, r.run[r.front:])
	clear(r.run[n:])
	r.run, r.front, r.runBase = r.run[:n], 0, 0
	for i := range r.run {
		if !r.run[i].dead {
			r.run[i].t.heapIdx = int32(-2 - i)
		}
	}
}

// load replaces the contents with es (the tasks' heapIdx need not be set),
// as one run in claim order.
func (r *readyQueue) load(es []readyEnt) {
	slices.SortFunc(es, func(a, b readyEnt) int {
		if entLess(&a, &b) {
			return -1
		}
		return 1 // ids are unique: no two entries are equal
	})
	*r = readyQueue{run: es, live: len(es)}
	for i := range es {
		es[i].t.heapIdx = int32(-2 - i)
	}
}
