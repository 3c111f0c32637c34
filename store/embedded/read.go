package embedded

import (
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nornq/norn"
)

// reader reads whole tasks from Pebble with one reusable iterator. Reads
// need no store lock: every transaction is one atomic batch.
type reader struct {
	s  *Store
	it *pebble.Iterator
}

func (s *Store) newReader() *reader { return &reader{s: s} }

// openReader returns a reader whose iterator is created now, so it sees
// the database as of this call whenever it is used.
func (s *Store) openReader() (*reader, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return nil, norn.Unavailable(err)
	}
	return &reader{s: s, it: it}, nil
}

func (r *reader) close() {
	if r.it != nil {
		r.it.Close()
		r.it = nil
	}
}

// task reads id; nil (no error) when it does not exist or does not match f.
func (r *reader) task(id string, summary bool, f *norn.Filter) (*norn.Task, error) {
	lo, hi := taskPrefix(id), taskEnd(id)
	if r.it == nil {
		it, err := r.s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
		if err != nil {
			return nil, norn.Unavailable(err)
		}
		r.it = it
	} else {
		r.it.SetBounds(lo, hi)
	}
	if !r.it.First() {
		if err := r.it.Error(); err != nil {
			return nil, norn.Unavailable(err)
		}
		return nil, nil
	}
	return r.s.decodeTask(r.it, id, lo, summary, f)
}

// tasksForward reads the whole claimed tasks ids (all of which must exist) in one
// forward pass of r's unbounded iterator: it visits them in key order and
// reaches each from the previous position with a few Next calls when it is
// near (claimed tasks usually sit next to each other: same queue, ready
// times and UUIDv7 ids in order), seeking only when it is not. A seek
// positions every level of the LSM; per task it was a third of the cost of
// reading claimed tasks back (docs/internals/embedded-performance.md). out[i] is ids[i].
func (r *reader) tasksForward(ids []string, cl []claimedAs, order []int32) ([]*norn.Task, error) {
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int { return strings.Compare(ids[a], ids[b]) })
	out := make([]*norn.Task, len(ids))
	a := &taskArena{tasks: make([]norn.Task, 0, len(ids)), hist: make([]norn.HistoryEntry, 0, len(ids))}
	var lo []byte
	for k, i := range order {
		a.left = len(order) - k
		id := ids[i]
		lo = append(append(append(lo[:0], pfxTask), id...), 0)
		if !r.forwardTo(lo) {
			if err := r.it.Error(); err != nil {
				return nil, norn.Unavailable(err)
			}
		}
		var c *claimedAs
		if cl != nil {
			c = &cl[i]
		}
		t, err := r.s.decodeTaskIn(r.it, id, lo, false, nil, a, c)
		if err == nil && t == nil {
			err = fmt.Errorf("embedded: claimed task %q has no record: %w", id, errCorrupt)
		}
		if err != nil {
			return nil, err
		}
		out[i] = t
	}
	return out, nil
}

// claimedAs is what a claim changed in a task: its new state and the
// assignment entry appended to its history. Claim reads its tasks from a
// view taken just before its batch is applied, where a task fresh from
// submit is one key (the claim adds a state record, which the read would
// have to step over and decode), and adds these.
type claimedAs struct {
	st   state
	hist norn.HistoryEntry
}

// claimScratch is what a claim needs only until its tasks are read back:
// for claims of 1,000 these are large allocations (the claimedAs alone are
// over 200 KB), zeroed on every claim and collected soon after, so they
// are recycled.
type claimScratch struct {
	as    []claimedAs
	ids   []string
	order []int32
}

var claimScratchPool = sync.Pool{New: func() any { return new(claimScratch) }}

// getClaimScratch returns scratch for a claim of n tasks.
func getClaimScratch(n int) *claimScratch {
	c := claimScratchPool.Get().(*claimScratch)
	if cap(c.as) < n {
		c.as, c.ids, c.order = make([]claimedAs, n), make([]string, n), make([]int32, n)
	}
	c.as, c.ids, c.order = c.as[:n], c.ids[:n], c.order[:n]
	return c
}

// release returns c to the pool, holding no references.
func (c *claimScratch) release() {
	clear(c.as)
	clear(c.ids)
	claimScratchPool.Put(c)
}

// forwardTo positions r.it at the first key >= k, stepping when the
// iterator is a few keys before k and seeking otherwise.
func (r *reader) forwardTo(k []byte) bool {
	it := r.it
	for i := 0; i < 8 && it.Valid(); i++ {
		if bytes.Compare(it.Key(), k) >= 0 {
			return true
		}
		it.Next()
	}
	return it.SeekGE(k)
}

// skipTask moves it past the remaining keys of the task with prefix lo:
// a few Next calls (the usual case), else one seek.
func skipTask(it *pebble.Iterator, id string, lo []byte) bool {
	for i := 0; i < 8; i++ {
		if !it.Valid() || !bytes.HasPrefix(it.Key(), lo) {
			return it.Valid()
		}
		it.Next()
	}
	if it.Valid() && bytes.HasPrefix(it.Key(), lo) {
		return it.SeekGE(taskEnd(id))
	}
	return it.Valid()
}

// decodeTask reads the task whose first key it is positioned at (prefix
// lo) and leaves it at the first key after the task. It returns nil when
// the task does not exist or does not match f.
func (s *Store) decodeTask(it *pebble.Iterator, id string, lo []byte, summary bool, f *norn.Filter) (*norn.Task, error) {
	return s.decodeTaskIn(it, id, lo, summary, f, nil, nil)
}

// taskArena gives the tasks a Claim returns, and their specs, a few
// allocations in all instead of two per task: allocating each norn.Task
// (with its history, a third of a 1M burn-down's decoding time went to
// mallocgc) cost more than decoding it (docs/internals/embedded-performance.md). The tasks of
// one claim then share their memory, which is freed when none of them is
// referenced any more. A nil *taskArena allocates as usual.
type taskArena struct {
	tasks []norn.Task // pre-sized: never grown, so pointers stay valid
	hist  []norn.HistoryEntry
	bytes []byte
	left  int // tasks still to decode, to size the next bytes buffer
}

// appendHistory is append(hs, h) taking a first entry from a.
func (a *taskArena) appendHistory(hs []norn.HistoryEntry, h norn.HistoryEntry) []norn.HistoryEntry {
	if a == nil || hs != nil || len(a.hist) == cap(a.hist) {
		return append(hs, h)
	}
	n := len(a.hist)
	a.hist = append(a.hist, h)
	return a.hist[n : n+1 : n+1]
}

func (a *taskArena) task() *norn.Task {
	if a == nil || len(a.tasks) == cap(a.tasks) {
		return new(norn.Task)
	}
	a.tasks = a.tasks[:len(a.tasks)+1]
	return &a.tasks[len(a.tasks)-1]
}

// copy returns a copy of b whose capacity ends with it (an append by the
// caller reallocates instead of overwriting the next copy).
func (a *taskArena) copy(b []byte) []byte {
	if a == nil {
		return append(make([]byte, 0, len(b)), b...)
	}
	if cap(a.bytes)-len(a.bytes) < len(b) {
		// Room for this many more of the same size, within reason.
		a.bytes = make([]byte, 0, max(len(b), min(len(b)*a.left, 64<<10)))
	}
	n := len(a.bytes)
	a.bytes = append(a.bytes, b...)
	return a.bytes[n:len(a.bytes):len(a.bytes)]
}

// decodeTaskIn is decodeTask taking the task's memory from a and, with c,
// giving the task c's state and history entry instead of its stored state.
func (s *Store) decodeTaskIn(it *pebble.Iterator, id string, lo []byte, summary bool, f *norn.Filter, a *taskArena, c *claimedAs) (*norn.Task, error) {
	var t *norn.Task
	var st state
	// The core records: 'a' (immutable, initial labels and state), then
	// optionally 'b' (labels) and 'c' (state) superseding parts of it.
	for it.Valid() {
		k := it.Key()
		if !bytes.HasPrefix(k, lo) || len(k) == len(lo) || k[len(lo)] > sufState {
			break
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, norn.Unavailable(err)
		}
		switch k[len(lo)] {
		case sufImmutable:
			im, err := decodeImmutableIn(v, !summary, true, a)
			if err != nil {
				return nil, fmt.Errorf("embedded: task %q: %w", id, err)
			}
			t = a.task()
			*t = norn.Task{ID: id, Queue: im.queue, Created: fromNanos(im.created), MaxAttempts: int(im.maxAttempts),
				Timeout: norn.Duration(im.timeout), MaxRuntime: norn.Duration(im.maxRuntime), Retry: im.retry, UniqueKey: im.uniqueKey,
				DependsOn: im.deps, Spec: im.spec, Labels: im.labels, ConcurrencyKey: im.key,
				Traceparent: im.traceparent, Tracestate: im.tracestate, ExpiresAt: fromNanos(im.expires), Batch: im.batch, SequenceKey: im.seqKey}
			if im.depRun {
				t.OnDependencyFailure = norn.DependencyRun
			}
			st = im.st
		case sufLabels:
			if t == nil {
				return nil, fmt.Errorf("embedded: task %q has labels but no record: %w", id, errCorrupt)
			}
			if t.Labels, err = decodeLabels(v); err != nil {
				return nil, fmt.Errorf("embedded: task %q labels: %w", id, err)
			}
		case sufState:
			if t == nil {
				return nil, fmt.Errorf("embedded: task %q has a state but no record: %w", id, errCorrupt)
			}
			if c != nil && !storedImplied(v) {
				// Superseded by c.st; only implied entries (which the
				// claim wrote out, in a batch this view does not hold)
				// are read from the record.
				st = state{}
				break
			}
			if st, err = decodeState(v); err != nil {
				return nil, fmt.Errorf("embedded: task %q state: %w", id, err)
			}
		}
		it.Next()
	}
	if err := it.Error(); err != nil {
		return nil, norn.Unavailable(err)
	}
	if t == nil {
		if it.Valid() && bytes.HasPrefix(it.Key(), lo) {
			return nil, fmt.Errorf("embedded: task %q has records but no immutable record: %w", id, errCorrupt)
		}
		return nil, nil
	}
	stored := st
	if c != nil {
		st = c.st
	}
	t.Status, t.Priority, t.Progress = statusOf(st.status), st.priority, st.progress
	t.Updated, t.RunAt, t.Deadline = fromNanos(st.updated), fromNanos(st.runAt), fromNanos(st.deadline)
	t.Owner, t.Lease, t.Attempts, t.Version = st.owner, st.lease, int(st.attempts), st.version
	t.Started = fromNanos(st.started)
	if (f != nil && !f.Match(t)) || summary {
		skipTask(it, id, lo)
		if f != nil && !f.Match(t) {
			return nil, it.Error()
		}
		return t, it.Error()
	}
	if err := readTaskTail(it, id, lo, t, a); err != nil {
		return nil, err
	}
	// Stored by position among the sorted dependencies; shown as listed.
	t.DependencyResults = norn.SortDependencyResults(t.DependsOn, t.DependencyResults)
	t.History = a.appendImplied(t.History, &stored)
	if c != nil {
		t.History = a.appendHistory(t.History, c.hist)
	}
	if lim := s.opts.HistoryLimit; len(t.History) > lim {
		t.History = append([]norn.HistoryEntry(nil), t.History[len(t.History)-lim:]...)
	}
	t.HistoryDropped = int(st.histNext) - len(t.History)
	return t, nil
}

// readTaskTail reads what follows a task's core records into t: its
// errors, history and result (logs are skipped: ReadLog reads them).
func readTaskTail(it *pebble.Iterator, id string, lo []byte, t *norn.Task, a *taskArena) error {
	for ok := it.Valid(); ok; {
		k := it.Key()
		if !bytes.HasPrefix(k, lo) || len(k) == len(lo) {
			break
		}
		suf := k[len(lo)]
		if suf == sufLog {
			// Logs are read by ReadLog only; jump over them.
			ok = it.SeekGE(taskKey(id, sufLog+1))
			continue
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return norn.Unavailable(err)
		}
		switch suf {
		case sufError:
			var e norn.ErrorInfo
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("embedded: task %q error record: %w", id, errCorrupt)
			}
			t.Errors = append(t.Errors, e)
		case sufHistory:
			h, err := decodeHistory(v)
			if err != nil {
				return fmt.Errorf("embedded: task %q history: %w", id, err)
			}
			t.History = a.appendHistory(t.History, h)
		case sufResult:
			t.Result = append(json.RawMessage(nil), v...)
		case sufSignal:
			var sg norn.Signal
			if err := json.Unmarshal(v, &sg); err != nil {
				return fmt.Errorf("embedded: task %q signal: %w", id, errCorrupt)
			}
			t.Signals = append(t.Signals, sg)
		case sufSignalWait:
			w := new(norn.SignalWait)
			if err := json.Unmarshal(v, w); err != nil {
				return fmt.Errorf("embedded: task %q signal wait: %w", id, errCorrupt)
			}
			t.SignalWait = w
		case sufDepResult:
			var r norn.DependencyResult
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("embedded: task %q dependency result: %w", id, errCorrupt)
			}
			t.DependencyResults = append(t.DependencyResults, r)
		}
		ok = it.Next()
	}
	if err := it.Error(); err != nil {
		return norn.Unavailable(err)
	}
	return nil
}

// readTask reads one task, ErrNotFound when missing.
func (s *Store) readTask(id string, summary bool) (*norn.Task, error) {
	r := s.newReader()
	defer r.close()
	t, err := r.task(id, summary, nil)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, norn.NotFound(id)
	}
	return t, nil
}

// Cursors: base64url of an order tag and the last key position returned.
func encodeCursor(order norn.Order, pos []byte) string {
	return norn.CursorString(append([]byte{orderTag(order)}, pos...))
}

func orderTag(o norn.Order) byte {
	switch o {
	case norn.OrderNewest:
		return 'n'
	case norn.OrderPriority:
		return 'p'
	}
	return 'i'
}

func decodeCursor(order norn.Order, c string) ([]byte, error) {
	b, err := norn.CursorBytes(c)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[0] != orderTag(order) || (order == norn.OrderPriority && len(b) < 6) {
		return nil, norn.BadCursor()
	}
	return b[1:], nil
}

// List returns one page of tasks matching q.
func (s *Store) List(ctx context.Context, q norn.Query) (norn.Page, error) {
	if err := s.enter(); err != nil {
		return norn.Page{}, err
	}
	defer s.exit()
	limit, err := q.PageLimit()
	if err != nil {
		return norn.Page{}, err
	}
	return s.page(ctx, q, limit)
}

// page scans in the order's key order from the cursor, collecting up to
// limit matches, and peeks for one more to decide whether a cursor is due.
func (s *Store) page(ctx context.Context, q norn.Query, limit int) (norn.Page, error) {
	var pos []byte
	if q.Cursor != "" {
		var err error
		if pos, err = decodeCursor(q.Order, q.Cursor); err != nil {
			return norn.Page{}, err
		}
	}
	if q.Order == norn.OrderPriority {
		return s.pagePriority(ctx, q, limit, pos)
	}
	if q.Filter.DependsOn != "" || q.Filter.Batch != "" {
		return s.pageIndexed(ctx, q, limit, pos)
	}
	main, err := s.db.NewIter(&pebble.IterOptions{})
	if err != nil {
		return norn.Page{}, norn.Unavailable(err)
	}
	defer main.Close()
	r := s.newReader()
	defer r.close()
	f := &q.Filter
	if f.Empty() {
		f = nil
	}
	page := norn.Page{Tasks: []*norn.Task{}}
	var last []byte
	started := false
	// seek positions the main iterator at the next candidate and returns
	// its id and cursor position.
	next := func(first bool) (string, []byte, bool) {
		switch q.Order {
		case norn.OrderNewest:
			var ok bool
			if pos == nil {
				ok = main.SeekLT([]byte{pfxTask + 1})
			} else {
				ok = main.SeekLT(taskPrefix(string(pos)))
			}
			if !ok || main.Key()[0] != pfxTask {
				return "", nil, false
			}
			id, _, _ := splitTaskKey(main.Key())
			return id, []byte(id), true
		default:
			var ok bool
			switch {
			case pos == nil:
				ok = main.SeekGE([]byte{pfxTask})
			case !first:
				// decodeTask left the iterator at the next task.
				ok = main.Valid()
			default:
				ok = main.SeekGE(taskEnd(string(pos)))
			}
			if !ok || main.Key()[0] != pfxTask {
				return "", nil, false
			}
			id, _, _ := splitTaskKey(main.Key())
			return id, []byte(id), true
		}
	}
	for n := 0; ; n++ {
		if n%256 == 255 {
			if err := ctx.Err(); err != nil {
				return norn.Page{}, err
			}
		}
		id, p, ok := next(!started)
		started = true
		if !ok {
			break
		}
		pos = p
		var t *norn.Task
		var err error
		if q.Order == norn.OrderID {
			// The main iterator walks the task's keys itself.
			t, err = s.decodeTask(main, id, taskPrefix(id), q.Summary, f)
		} else {
			t, err = r.task(id, q.Summary, f)
		}
		if err != nil {
			return norn.Page{}, err
		}
		if t == nil {
			continue
		}
		if len(page.Tasks) == limit {
			page.NextCursor = encodeCursor(q.Order, last)
			break
		}
		page.Tasks = append(page.Tasks, t)
		last = p
	}
	if err := main.Error(); err != nil {
		return norn.Page{}, norn.Unavailable(err)
	}
	return page, nil
}

// pageIndexed is page for a depends_on filter in id order (or newest
// first, which is id order reversed): the index names the candidates, so
// only they are read.
func (s *Store) pageIndexed(ctx context.Context, q norn.Query, limit int, pos []byte) (norn.Page, error) {
	ids := s.indexedIDs(&q.Filter)
	newest := q.Order == norn.OrderNewest
	if newest {
		slices.Reverse(ids)
	}
	if pos != nil {
		// Skip to the first id after the cursor in this order.
		p := string(pos)
		i, _ := slices.BinarySearchFunc(ids, p, func(a, b string) int {
			if newest {
				return strings.Compare(b, a)
			}
			return strings.Compare(a, b)
		})
		for i < len(ids) && ids[i] == p {
			i++
		}
		ids = ids[i:]
	}
	r := s.newReader()
	defer r.close()
	page := norn.Page{Tasks: []*norn.Task{}}
	for i, id := range ids {
		if i%256 == 255 {
			if err := ctx.Err(); err != nil {
				return norn.Page{}, err
			}
		}
		t, err := r.task(id, q.Summary, &q.Filter)
		if err != nil {
			return norn.Page{}, err
		}
		if t == nil {
			continue
		}
		if len(page.Tasks) == limit {
			page.NextCursor = encodeCursor(q.Order, []byte(page.Tasks[limit-1].ID))
			break
		}
		page.Tasks = append(page.Tasks, t)
	}
	return page, nil
}

// prioKey is a position in priority order: priority desc, then id asc.
type prioKey struct {
	prio uint32
	id   string
}

func (a prioKey) before(b prioKey) bool {
	if a.prio != b.prio {
		return a.prio > b.prio
	}
	return a.id < b.id
}

func (a prioKey) cursor() []byte {
	return append(binary.BigEndian.AppendUint32(nil, a.prio), a.id...)
}

// prioHeap is a max-heap (the last in order on top) used to keep the
// first K positions of a scan.
type prioHeap []prioKey

func (h prioHeap) Len() int           { return len(h) }
func (h prioHeap) Less(i, j int) bool { return h[j].before(h[i]) }
func (h prioHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *prioHeap) Push(x any)        { *h = append(*h, x.(prioKey)) }
func (h *prioHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// firstByPriority returns, in order, the first k tasks after pos (nil: from
// the start) whose in-memory fields match f. Priority order has no disk
// index (a submit writes one key per task), so each page selects from
// memory in O(n log k).
func (s *Store) firstByPriority(after *prioKey, f *norn.Filter, k int) []prioKey {
	h := make(prioHeap, 0, k)
	s.mu.Lock()
	s.eachMem(f, func(t *task) {
		c := prioKey{t.st.priority, t.id}
		if after != nil && !after.before(c) {
			return
		}
		if len(h) == k && !c.before(h[0]) {
			return
		}
		if len(h) == k {
			h[0] = c
			heap.Fix(&h, 0)
		} else {
			heap.Push(&h, c)
		}
	})
	s.mu.Unlock()
	out := make([]prioKey, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&h).(prioKey)
	}
	return out
}

func (s *Store) pagePriority(ctx context.Context, q norn.Query, limit int, pos []byte) (norn.Page, error) {
	var after *prioKey
	if pos != nil {
		after = &prioKey{binary.BigEndian.Uint32(pos), string(pos[4:])}
	}
	f := &q.Filter
	var ff *norn.Filter
	if !f.Empty() {
		ff = f
	}
	r := s.newReader()
	defer r.close()
	page := norn.Page{Tasks: []*norn.Task{}}
	var last prioKey
	for {
		if err := ctx.Err(); err != nil {
			return norn.Page{}, err
		}
		cands := s.firstByPriority(after, f, limit+1)
		for i := range cands {
			c := cands[i]
			after = &c
			t, err := r.task(c.id, q.Summary, ff)
			if err != nil {
				return norn.Page{}, err
			}
			if t == nil {
				continue
			}
			if len(page.Tasks) == limit {
				page.NextCursor = encodeCursor(q.Order, last.cursor())
				return page, nil
			}
			page.Tasks = append(page.Tasks, t)
			last = c
		}
		if len(cands) < limit+1 {
			return page, nil
		}
	}
}

// Stream iterates over every task matching q page by page: it holds one
// page at a time, never the result set.
func (s *Store) Stream(ctx context.Context, q norn.Query) (norn.TaskIterator, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := q.Validate(); err != nil {
		return nil, err
	}
	if q.Cursor != "" {
		if _, err := decodeCursor(q.Order, q.Cursor); err != nil {
			return nil, err
		}
	}
	return &taskStream{s: s, ctx: ctx, q: q, left: q.Limit}, nil
}

const streamPage = 256

type taskStream struct {
	s      *Store
	ctx    context.Context
	q      norn.Query
	left   int // remaining cap, 0 = unlimited (when q.Limit == 0)
	buf    []*norn.Task
	cur    *norn.Task
	end    bool
	err    error
	closed bool
}

func (it *taskStream) Next() bool {
	if it.closed || it.err != nil {
		return false
	}
	if it.q.Limit > 0 && it.left == 0 {
		it.end = true
	}
	for len(it.buf) == 0 {
		if it.end {
			it.cur = nil
			return false
		}
		if err := it.ctx.Err(); err != nil {
			it.err = err
			return false
		}
		n := streamPage
		if it.q.Limit > 0 && it.left < n {
			n = it.left
		}
		if err := it.s.enter(); err != nil {
			it.err = err
			return false
		}
		p, err := it.s.page(it.ctx, it.q, n)
		it.s.exit()
		if err != nil {
			it.err = err
			return false
		}
		it.buf = p.Tasks
		it.q.Cursor = p.NextCursor
		if p.NextCursor == "" {
			it.end = true
		}
	}
	it.cur = it.buf[0]
	it.buf[0] = nil
	it.buf = it.buf[1:]
	if it.q.Limit > 0 {
		it.left--
	}
	return true
}

func (it *taskStream) Item() *norn.Task { return it.cur }
func (it *taskStream) Err() error       { return it.err }
func (it *taskStream) Close() error {
	it.closed = true
	it.buf, it.cur = nil, nil
	return nil
}

// onlyQueueStatus reports whether f uses nothing but queues and statuses,
// which the per queue×status counters answer without a scan.
func onlyQueueStatus(f *norn.Filter) bool {
	g := *f
	g.Queues, g.Statuses = nil, nil
	return g.Empty()
}

// matchMem matches every filter field except labels, depends_on and
// unique_key against memory (eachMem answers depends_on from its index);
// onDisk says when the others need the disk records.
func matchMem(f *norn.Filter, t *task) bool {
	if len(f.Queues) > 0 && !containsStr(f.Queues, t.q.name) {
		return false
	}
	if len(f.Statuses) > 0 && !containsStatus(f.Statuses, t.st.status) {
		return false
	}
	if f.Owner != "" && t.st.owner != f.Owner {
		return false
	}
	if f.IDContains != "" && !strings.Contains(t.id, f.IDContains) {
		return false
	}
	if !f.CreatedAfter.IsZero() && !(t.created > f.CreatedAfter.UnixNano()) {
		return false
	}
	if !f.CreatedBefore.IsZero() && !(t.created < f.CreatedBefore.UnixNano()) {
		return false
	}
	if !f.UpdatedAfter.IsZero() && !(t.st.updated > f.UpdatedAfter.UnixNano()) {
		return false
	}
	if !f.UpdatedBefore.IsZero() && !(t.st.updated < f.UpdatedBefore.UnixNano()) {
		return false
	}
	return true
}

// onDisk reports whether f names fields memory does not hold: the labels
// and the unique keys live only in the task's immutable record (the
// unique-key index serves submits, not listings).
func onDisk(f *norn.Filter) bool {
	return len(f.Labels) > 0 || f.UniqueKey != ""
}

func containsStr(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

func containsStatus(l []norn.Status, c uint8) bool {
	s := statusOf(c)
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// Count returns how many tasks match f: from the counters when f only
// names queues and statuses, else by a scan of memory (or of disk when
// labels are filtered).
func (s *Store) Count(ctx context.Context, f norn.Filter) (int64, error) {
	g, err := s.CountGrouped(ctx, f)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, c := range g {
		n += c.Count
	}
	return n, nil
}

// CountGrouped returns counts by queue×status of tasks matching f.
func (s *Store) CountGrouped(ctx context.Context, f norn.Filter) ([]norn.GroupCount, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := f.Validate(); err != nil {
		return nil, err
	}
	counts := map[string]*[numStatus]int64{}
	add := func(q string, st uint8, n int64) {
		c := counts[q]
		if c == nil {
			c = new([numStatus]int64)
			counts[q] = c
		}
		c[st] += n
	}
	switch {
	case onlyQueueStatus(&f):
		s.mu.Lock()
		for _, q := range s.queues {
			if len(f.Queues) > 0 && !containsStr(f.Queues, q.name) {
				continue
			}
			for st, n := range q.counts {
				if n != 0 && (len(f.Statuses) == 0 || containsStatus(f.Statuses, uint8(st))) {
					add(q.name, uint8(st), n)
				}
			}
		}
		s.mu.Unlock()
	case !onDisk(&f):
		s.mu.Lock()
		s.eachMem(&f, func(t *task) { add(t.q.name, t.st.status, 1) })
		s.mu.Unlock()
	default:
		err := s.scan(ctx, &f, func(t *norn.Task) { add(t.Queue, statusCode(t.Status), 1) })
		if err != nil {
			return nil, err
		}
	}
	out := []norn.GroupCount{}
	for q, c := range counts {
		for st, n := range c {
			if n != 0 {
				out = append(out, norn.GroupCount{Queue: q, Status: norn.AllStatuses[st], Count: n})
			}
		}
	}
	norn.SortGroupCounts(out)
	return out, nil
}

// scan calls fn with the summary of every task on disk matching f: all
// of them read, or only those the depends_on index names.
func (s *Store) scan(ctx context.Context, f *norn.Filter, fn func(*norn.Task)) error {
	if f.DependsOn != "" || f.Batch != "" {
		r := s.newReader()
		defer r.close()
		for i, id := range s.indexedIDs(f) {
			if i%1024 == 1023 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			t, err := r.task(id, true, f)
			if err != nil {
				return err
			}
			if t != nil {
				fn(t)
			}
		}
		return nil
	}
	main, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{pfxTask}, UpperBound: []byte{pfxTask + 1}})
	if err != nil {
		return norn.Unavailable(err)
	}
	defer main.Close()
	n := 0
	for ok := main.First(); ok; ok = main.Valid() {
		if n++; n%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		id := lastID(main)
		t, err := s.decodeTask(main, id, taskPrefix(id), true, f)
		if err != nil {
			return err
		}
		if t != nil {
			fn(t)
		}
	}
	if err := main.Error(); err != nil {
		return norn.Unavailable(err)
	}
	return nil
}

func lastID(it *pebble.Iterator) string {
	id, _, _ := splitTaskKey(it.Key())
	return id
}

// matchingIDs lists the ids of tasks matching f.
func (s *Store) matchingIDs(ctx context.Context, f norn.Filter) ([]string, error) {
	var ids []string
	if !onDisk(&f) {
		s.mu.Lock()
		s.eachMem(&f, func(t *task) { ids = append(ids, t.id) })
		s.mu.Unlock()
		return ids, nil
	}
	err := s.scan(ctx, &f, func(t *norn.Task) { ids = append(ids, t.ID) })
	return ids, err
}

// ReadLog returns log entries with Seq > after, at most limit (0 = all).
func (s *Store) ReadLog(ctx context.Context, id string, after uint64, limit int) ([]norn.LogEntry, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	if err := norn.ValidateLogRead(id, limit); err != nil {
		return nil, err
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	// The immutable record is the one every task has; a task that never
	// changed state has no state record yet.
	if _, c, err := snap.Get(taskKey(id, sufImmutable)); err == pebble.ErrNotFound {
		return nil, norn.NotFound(id)
	} else if err != nil {
		return nil, norn.Unavailable(err)
	} else {
		c.Close()
	}
	it, err := snap.NewIter(&pebble.IterOptions{
		LowerBound: taskSeqKey(id, sufLog, after+1),
		UpperBound: taskKey(id, sufLog+1),
	})
	if err != nil {
		return nil, norn.Unavailable(err)
	}
	defer it.Close()
	out := []norn.LogEntry{}
	for ok := it.First(); ok; ok = it.Next() {
		k := it.Key()
		if len(k) < 8 {
			continue
		}
		seq := binary.BigEndian.Uint64(k[len(k)-8:])
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, norn.Unavailable(err)
		}
		e, err := decodeLog(seq, v)
		if err != nil {
			return nil, fmt.Errorf("embedded: task %q log %d: %w", id, seq, err)
		}
		out = append(out, e)
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, it.Error()
}

// lastLeased returns the newest history entry of task id that carries a
// lease (nil when none is kept): the entry that ended the latest lease, or
// its assignment while it runs. It reads what is committed, as the task's
// history reads.
func (s *Store) lastLeased(id string) (*norn.HistoryEntry, error) {
	st, err := s.storedState(id)
	if err != nil {
		return nil, err
	}
	// Implied entries are the newest; every one of them carries a lease.
	for bit := uint8(impComplete); bit >= impAssign; bit >>= 1 {
		if st.implied&bit != 0 {
			h := st.impliedEntry(bit)
			return &h, nil
		}
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: taskKey(id, sufHistory), UpperBound: taskKey(id, sufHistory+1)})
	if err != nil {
		return nil, norn.Unavailable(err)
	}
	defer it.Close()
	for ok := it.Last(); ok; ok = it.Prev() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, norn.Unavailable(err)
		}
		h, err := decodeHistory(v)
		if err != nil {
			return nil, fmt.Errorf("embedded: task %q history: %w", id, err)
		}
		if h.Lease != 0 {
			return &h, nil
		}
	}
	return nil, it.Error()
}

// storedState reads task id's committed state: its state record, or the
// one in its immutable record when it has none (none at all: the zero
// state).
func (s *Store) storedState(id string) (state, error) {
	v, c, err := s.db.Get(taskKey(id, sufState))
	if err == pebble.ErrNotFound {
		if v, c, err = s.db.Get(taskKey(id, sufImmutable)); err == nil {
			im, derr := decodeImmutable(v, false, false)
			c.Close()
			return im.st, derr
		}
	}
	if err == pebble.ErrNotFound {
		return state{}, nil
	}
	if err != nil {
		return state{}, norn.Unavailable(err)
	}
	defer c.Close()
	st, err := decodeState(v)
	if err != nil {
		return st, fmt.Errorf("embedded: task %q state: %w", id, err)
	}
	return st, nil
}

// logEntry reads entry seq of task id's log (nil when there is none).
func (s *Store) logEntry(id string, seq uint64) (*norn.LogEntry, error) {
	v, c, err := s.db.Get(taskSeqKey(id, sufLog, seq))
	if err == pebble.ErrNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, norn.Unavailable(err)
	}
	defer c.Close()
	e, err := decodeLog(seq, v)
	if err != nil {
		return nil, fmt.Errorf("embedded: task %q log %d: %w", id, seq, err)
	}
	return &e, nil
}
