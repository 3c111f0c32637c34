package embedded

import (
	"github.com/nornq/norn"
)

// Status indexes (positions in norn.AllStatuses) as compact bytes.
const (
	stScheduled uint8 = iota
	stBlocked
	stReady
	stRunning
	stCompleted
	stAborted
	stCancelled
	numStatus
)

func statusCode(s norn.Status) uint8 { return uint8(norn.StatusIndex(s)) }

func statusOf(c uint8) norn.Status { return norn.AllStatuses[c] }

func terminal(c uint8) bool { return c >= stCompleted }

// task is the in-memory index entry of one task: the state record plus what
// the indexes need. Spec, labels, result, errors and history stay on disk.
type task struct {
	id      string
	q       *queue
	g       *keyGroup // the task's concurrency key group in q
	st      state
	created int64
	timeout int64
	// maxRuntime bounds every attempt (0: no limit); see norn.RuntimeLimit.
	maxRuntime int64
	retry      *norn.RetryPolicy
	// expires is the task's expiry in nanoseconds (0: none); see
	// norn.NewTask.ExpiresAt.
	expires int64
	timerAt int64 // when the timer fires

	heapIdx     int32 // position in g.ready (readyQueue), -1 when absent
	timerIdx    int32 // position in the timer heap, -1 when absent
	maxAttempts int32
	depsLeft    int32 // dependencies not yet completed (blocked tasks)
	// hasDependents: s.dependents has an entry for this task. Kept out of
	// the struct because few tasks have dependents and a million tasks in
	// memory make every byte count (docs/internals/embedded-performance.md).
	hasDependents bool
	deleted       bool
	// inLeases: the timer is in s.leases, not s.timers.
	inLeases bool
	// inBatch: t is a member of a batch (s.batchOf).
	inBatch bool
	// inSeq: t is a member of a sequence (s.seqOf).
	inSeq bool
	slot  uint32 // in s.tasks
}

// queue holds one queue's settings, ready queues, counters and claim waiters.
type queue struct {
	name     string
	paused   bool
	defaults norn.QueueDefaults
	// configured is true once UpdateQueue stored settings for it.
	configured bool
	flow       norn.QueueFlow
	// top, keys and nokey hold the ready tasks by concurrency key (flow.go).
	top     groupHeap
	keys    map[string]*keyGroup
	nokey   *keyGroup
	counts  [numStatus]int64
	waiters map[*waiter]struct{}
	// fairNow is the virtual time of the group a fair claim took last.
	fairNow int64
	// bucket is the rate limit's token bucket (nil: full); held counts
	// the tasks limits held back from claims since the store opened
	// (ratelimit.go).
	bucket *norn.Bucket
	held   norn.Held
	// keyBuckets are the keys' rate-limit buckets (absent: full), starved
	// the groups out of the top heap until a token comes (keyrate.go).
	keyBuckets map[string]*norn.Bucket
	starved    []*keyGroup
}

func (q *queue) total() int64 {
	var n int64
	for _, c := range q.counts {
		n += c
	}
	return n
}

func (q *queue) info() norn.QueueInfo {
	qi := norn.QueueInfo{Name: q.name, Paused: q.paused, Counts: norn.StatusCounts(), Defaults: q.defaults,
		QueueFlow: q.flow}
	if q.defaults.Retry != nil {
		r := *q.defaults.Retry
		qi.Defaults.Retry = &r
	}
	for i, c := range q.counts {
		qi.Counts[norn.AllStatuses[i]] = c
	}
	return qi
}

// waiter is a long-polling claimer; ch is closed when one of its queues gets
// a ready task.
type waiter struct {
	ch   chan struct{}
	done bool
}

func (w *waiter) wake() {
	if !w.done {
		w.done = true
		close(w.ch)
	}
}

// readyHeap orders claimable tasks: priority desc, ready time asc, id asc.
// Entries carry copies of the sort keys so that comparisons read only the
// heap's own contiguous memory: with a million ready tasks, following a
// pointer to each task (and its id to another allocation) per comparison
// was the cost of heap.down (docs/internals/embedded-performance.md). Ids that are
// canonical lowercase UUIDs (every generated id) compare as two integers,
// which orders them exactly as their strings do; other ids compare as
// strings.
type readyHeap []readyEnt

type readyEnt struct {
	readyAt  int64
	priority uint32
	isUUID   bool
	dead     bool      // removed from the middle of a readyQueue's run
	key      [2]uint64 // the id's 128 bits when isUUID
	t        *task
}

func newReadyEnt(t *task) readyEnt {
	e := readyEnt{readyAt: t.st.readyAt, priority: t.st.priority, t: t}
	e.key, e.isUUID = uuidKey(t.id)
	return e
}

// uuidKey returns the 128 bits of a canonical lowercase UUID string
// (8-4-4-4-12 hex digits). For two such strings, comparing the bits
// compares the strings: the dashes sit at the same places and the digits
// 0-9a-f sort as their values.
func uuidKey(id string) (k [2]uint64, ok bool) {
	if len(id) != 36 || id[8] != '-' || id[13] != '-' || id[18] != '-' || id[23] != '-' {
		return k, false
	}
	// Table lookups without branches per digit: every lease operation
	// parses its task's id (docs/internals/embedded-performance.md).
	var bad byte
	for w, pos := range &uuidDigits {
		var v uint64
		for _, i := range pos {
			d := hexDigit[id[i]]
			bad |= d
			v = v<<4 | uint64(d&0xf)
		}
		k[w] = v
	}
	if bad == 0xff {
		return [2]uint64{}, false
	}
	return k, true
}

// uuidDigits are the positions of a UUID string's hex digits, by half.
var uuidDigits = [2][16]uint8{
	{0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 14, 15, 16, 17},
	{19, 20, 21, 22, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35},
}

// hexDigit maps a lowercase hex digit to its value and every other byte
// to 0xff.
var hexDigit = func() (t [256]byte) {
	for i := range t {
		switch {
		case i >= '0' && i <= '9':
			t[i] = byte(i - '0')
		case i >= 'a' && i <= 'f':
			t[i] = byte(i - 'a' + 10)
		default:
			t[i] = 0xff
		}
	}
	return t
}()

func (h readyHeap) less(i, j int) bool { return entLess(&h[i], &h[j]) }

// entLess orders ready entries: priority desc, ready time asc, id asc.
func entLess(a, b *readyEnt) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if a.readyAt != b.readyAt {
		return a.readyAt < b.readyAt
	}
	if a.isUUID && b.isUUID {
		if a.key[0] != b.key[0] {
			return a.key[0] < b.key[0]
		}
		return a.key[1] < b.key[1]
	}
	return a.t.id < b.t.id
}

func (h readyHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].t.heapIdx = int32(i)
	h[j].t.heapIdx = int32(j)
}

// The heap operations below are container/heap's algorithms written for
// readyEnt: through heap.Interface every Push and Pop boxed a 40-byte entry
// into an interface (one allocation each) and every comparison was an
// interface call.

func (h readyHeap) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h readyHeap) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 {
			break
		}
		j := j1
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// push adds e.
func (h *readyHeap) push(e readyEnt) {
	e.t.heapIdx = int32(len(*h))
	*h = append(*h, e)
	h.up(len(*h) - 1)
}

// remove deletes the entry at i.
func (h *readyHeap) remove(i int) {
	old := *h
	n := len(old) - 1
	if n != i {
		old.swap(i, n)
		if !old.down(i, n) {
			old.up(i)
		}
	}
	old[n].t.heapIdx = -1
	old[n] = readyEnt{}
	*h = old[:n]
}

// fix restores the order after the entry at i changed.
func (h readyHeap) fix(i int) {
	if !h.down(i, len(h)) {
		h.up(i)
	}
}

// timerHeap orders every task with a pending time-driven duty (run_at,
// lease deadline, retention expiry) by when it is due. An entry carries
// its due time (a copy of t.timerAt) and the operations are written for
// it, like the ready heap's: through heap.Interface every comparison was
// an interface call reading two tasks scattered over the heap, a cache
// miss each, and a burn-down pushes every completed task's retention
// timer and removes every claim's deadline (docs/internals/embedded-performance.md).
// The two heaps' operations are not one generic function: Go calls a type
// parameter's methods through the instantiation's dictionary, so less and
// swap would no longer be inlined.
type timerHeap []timerEnt

type timerEnt struct {
	at int64
	t  *task
}

func (h timerHeap) less(i, j int) bool { return h[i].at < h[j].at }

func (h timerHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].t.timerIdx = int32(i)
	h[j].t.timerIdx = int32(j)
}

func (h timerHeap) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.less(j, i) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h timerHeap) down(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 {
			break
		}
		j := j1
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2
		}
		if !h.less(j, i) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// push adds t, due at t.timerAt.
func (h *timerHeap) push(t *task) {
	t.timerIdx = int32(len(*h))
	*h = append(*h, timerEnt{at: t.timerAt, t: t})
	h.up(len(*h) - 1)
}

// remove deletes the entry at i.
func (h *timerHeap) remove(i int) {
	old := *h
	n := len(old) - 1
	if n != i {
		old.swap(i, n)
		if !old.down(i, n) {
			old.up(i)
		}
	}
	old[n].t.timerIdx = -1
	old[n] = timerEnt{}
	*h = old[:n]
}

// fix restores the order after the entry at i got a new due time at.
func (h timerHeap) fix(i int, at int64) {
	h[i].at = at
	if !h.down(i, len(h)) {
		h.up(i)
	}
}

// init orders entries appended in any order.
func (h timerHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i, len(h))
	}
}

// timerFor returns when t's next time-driven duty is due, 0 for none.
func timerFor(t *task) int64 {
	switch t.st.status {
	case stScheduled:
		if t.expires != 0 && t.expires < t.st.runAt {
			return t.expires
		}
		return t.st.runAt
	case stReady, stBlocked:
		return t.expires // 0: none
	case stRunning:
		return t.st.deadline
	case stCompleted, stAborted, stCancelled:
		r := t.q.defaults.Retention.For(statusOf(t.st.status))
		if r <= 0 {
			return 0
		}
		return t.st.endedAt + int64(r)
	}
	return 0
}

// index brings every in-memory index in line with t.st after a change from
// old (counted is false when t was not counted before, i.e. it is new).
func (s *Store) index(t *task, old state, counted bool) {
	g := t.g
	regroup := false
	if counted {
		if old.status != t.st.status {
			t.q.counts[old.status]--
			t.q.counts[t.st.status]++
			if old.status == stRunning {
				g.running--
				regroup = true
			}
			if t.st.status == stRunning {
				g.running++
				regroup = true
			}
		}
	} else {
		if g.tasks == 0 && g != t.q.nokey {
			t.q.keys[g.key] = g // back after an undone deletion
		}
		g.tasks++
		t.q.counts[t.st.status]++
		if t.st.status == stRunning {
			g.running++
			regroup = true
		}
	}
	if t.st.status == stReady && !t.deleted {
		if t.heapIdx != -1 {
			e := g.ready.entry(t)
			if e.priority != t.st.priority || e.readyAt != t.st.readyAt {
				e.priority, e.readyAt = t.st.priority, t.st.readyAt
				g.ready.fix(t)
				regroup = true
			}
		} else {
			g.ready.push(newReadyEnt(t))
			regroup = true
		}
	} else if t.heapIdx != -1 {
		g.ready.remove(t)
		regroup = true
	}
	if regroup {
		t.q.fixGroup(g)
	}
	s.setTimer(t, timerFor(t))
}

// unindex removes t from every index (deletion).
func (s *Store) unindex(t *task) {
	g := t.g
	t.q.counts[t.st.status]--
	if t.st.status == stRunning {
		g.running--
	}
	if t.heapIdx != -1 {
		g.ready.remove(t)
	}
	t.q.fixGroup(g)
	g.tasks--
	t.q.dropGroup(g)
	s.setTimer(t, 0)
}

func (s *Store) setTimer(t *task, at int64) {
	// A running task's timer (its lease deadline) lives in s.leases, every
	// other one in s.timers; see Store.leases.
	want := &s.timers
	if t.st.status == stRunning {
		want = &s.leases
	}
	if t.timerIdx >= 0 {
		cur := &s.timers
		if t.inLeases {
			cur = &s.leases
		}
		switch {
		case at == 0 || cur != want:
			cur.remove(int(t.timerIdx))
		case t.timerAt != at:
			t.timerAt = at
			cur.fix(int(t.timerIdx), at)
		}
	}
	if at != 0 && t.timerIdx < 0 {
		t.timerAt = at
		t.inLeases = want == &s.leases
		want.push(t)
	}
	if at != 0 && (s.armedAt == 0 || at < s.armedAt) {
		s.kickMonitor()
	}
}

// firstTimer returns the task whose timer is due first, nil when none is
// pending.
func (s *Store) firstTimer() *task {
	var first *task
	if len(s.timers) > 0 {
		first = s.timers[0].t
	}
	if len(s.leases) > 0 && (first == nil || s.leases[0].at < first.timerAt) {
		first = s.leases[0].t
	}
	return first
}

// nextTimer returns the earliest due time, 0 when nothing is pending.
func (s *Store) nextTimer() int64 {
	if len(s.batchDue) > 0 {
		return 1 // a batch's callbacks are due now
	}
	next := s.nextScheduleFire()
	if t := s.firstTimer(); t != nil && (next == 0 || t.timerAt < next) {
		next = t.timerAt
	}
	return next
}

// toTask renders the in-memory part of t as a norn.Task (no spec, labels,
// result, errors or history).
func (t *task) toTask() *norn.Task {
	nt := &norn.Task{
		ID:          t.id,
		Queue:       t.q.name,
		Priority:    t.st.priority,
		Status:      statusOf(t.st.status),
		Progress:    t.st.progress,
		Created:     fromNanos(t.created),
		Updated:     fromNanos(t.st.updated),
		RunAt:       fromNanos(t.st.runAt),
		Owner:       t.st.owner,
		Deadline:    fromNanos(t.st.deadline),
		Lease:       t.st.lease,
		Attempts:    int(t.st.attempts),
		MaxAttempts: int(t.maxAttempts),
		Timeout:     norn.Duration(t.timeout),
		MaxRuntime:  norn.Duration(t.maxRuntime),
		Started:     fromNanos(t.st.started),
		ExpiresAt:   fromNanos(t.expires),
		Version:     t.st.version,
	}
	if t.retry != nil {
		r := *t.retry
		nt.Retry = &r
	}
	return nt
}

// getDependents returns the tasks waiting for t.
func (s *Store) getDependents(t *task) []*task {
	if !t.hasDependents {
		return nil
	}
	return s.dependents[t]
}

func (s *Store) setDependents(t *task, d []*task) {
	if len(d) == 0 {
		delete(s.dependents, t)
		t.hasDependents = false
		return
	}
	s.dependents[t] = d
	t.hasDependents = true
}
