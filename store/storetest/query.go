package storetest

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func testListOrdersPaging(t *testing.T, f Factory) {
	e := newEnv(t, f)
	var nts []norn.NewTask
	for k := 0; k < 25; k++ {
		i := k * 7 % 25 // submission order differs from id order
		nts = append(nts, norn.NewTask{ID: fmt.Sprintf("t-%02d", i), Queue: "q", Priority: uint32(i % 4),
			Spec: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	}
	e.submit(nts...)
	var asc []string
	for i := 0; i < 25; i++ {
		asc = append(asc, fmt.Sprintf("t-%02d", i))
	}
	desc := append([]string(nil), asc...)
	sort.Sort(sort.Reverse(sort.StringSlice(desc)))
	prio := append([]string(nil), asc...)
	sort.SliceStable(prio, func(a, b int) bool { return prioOf(prio[a]) > prioOf(prio[b]) })

	for _, tc := range []struct {
		order norn.Order
		want  []string
	}{{norn.OrderID, asc}, {norn.OrderNewest, desc}, {norn.OrderPriority, prio}} {
		for _, limit := range []int{1, 7, 25, 1000} {
			eqStrings(t, fmt.Sprintf("List order %q limit %d", tc.order, limit), ids(e.listAll(norn.Query{Order: tc.order, Limit: limit})), tc.want)
		}
		it, err := e.s.Stream(e.ctx, norn.Query{Order: tc.order})
		eqStrings(t, fmt.Sprintf("Stream order %q", tc.order), ids(collect(t, it, err)), tc.want)
		it, err = e.s.Stream(e.ctx, norn.Query{Order: tc.order, Limit: 10})
		eqStrings(t, fmt.Sprintf("Stream order %q limit 10", tc.order), ids(collect(t, it, err)), tc.want[:10])
	}
	p, err := e.s.List(e.ctx, norn.Query{Limit: 25})
	if err != nil || len(p.Tasks) != 25 {
		t.Fatalf("List limit 25: %d tasks, %v", len(p.Tasks), err)
	}
	if p.NextCursor != "" {
		// A cursor at the end is allowed, but must then yield an empty last page.
		p2, err := e.s.List(e.ctx, norn.Query{Limit: 25, Cursor: p.NextCursor})
		if err != nil || len(p2.Tasks) != 0 || p2.NextCursor != "" {
			t.Fatalf("page after the last: %d tasks, cursor %q, %v", len(p2.Tasks), p2.NextCursor, err)
		}
	}
	jsonEq(t, "listed spec", p.Tasks[3].Spec, `{"i":3}`)

	// The default page size is 100.
	nts = nts[:0]
	for i := 0; i < 130; i++ {
		nts = append(nts, norn.NewTask{ID: fmt.Sprintf("u-%03d", i), Queue: "q"})
	}
	e.submit(nts...)
	p, err = e.s.List(e.ctx, norn.Query{})
	if err != nil || len(p.Tasks) != norn.DefaultListLimit || p.NextCursor == "" {
		t.Fatalf("List with default limit: %d tasks, cursor %q, %v; want %d and a cursor", len(p.Tasks), p.NextCursor, err, norn.DefaultListLimit)
	}

	// The summary view drops spec, result, errors and history only.
	c := e.claim("w", "q")
	e.complete(c, `{"ok":true}`)
	full := e.get(c.ID)
	p, err = e.s.List(e.ctx, norn.Query{Filter: norn.Filter{IDContains: c.ID}, Summary: true})
	if err != nil || len(p.Tasks) != 1 {
		t.Fatalf("List summary: %v, %v", p.Tasks, err)
	}
	sameTask(t, "List summary view", full.Summary(), p.Tasks[0])
	it, err := e.s.Stream(e.ctx, norn.Query{Filter: norn.Filter{IDContains: c.ID}, Summary: true})
	st := collect(t, it, err)
	if len(st) != 1 {
		t.Fatalf("Stream summary: %d tasks", len(st))
	}
	sameTask(t, "Stream summary view", full.Summary(), st[0])
	p, err = e.s.List(e.ctx, norn.Query{Filter: norn.Filter{IDContains: c.ID}})
	if err != nil || len(p.Tasks) != 1 {
		t.Fatalf("List full: %v, %v", p.Tasks, err)
	}
	sameTask(t, "List full view", full, p.Tasks[0])

	_, err = e.s.List(e.ctx, norn.Query{Cursor: "not a cursor!"})
	wantField(t, "List with malformed cursor", err, norn.ErrInvalidArgument, "cursor")
}

func prioOf(id string) int {
	i, _ := strconv.Atoi(id[2:])
	return i % 4
}

// checkFilter asserts List (paged), Stream and Count all return exactly want.
func (b *testBundle) checkFilter(name string, f norn.Filter, want []string) {
	b.t.Helper()
	want = append([]string(nil), want...)
	sort.Strings(want)
	if want == nil {
		want = []string{}
	}
	got := sortedIDs(b.listAll(norn.Query{Filter: f, Limit: 7}))
	eqStrings(b.t, "List "+name, got, want)
	it, err := b.s.Stream(b.ctx, norn.Query{Filter: f})
	got = sortedIDs(collect(b.t, it, err))
	eqStrings(b.t, "Stream "+name, got, want)
	n, err := b.s.Count(b.ctx, f)
	if err != nil {
		b.t.Fatalf("Count %s: %v", name, err)
	}
	if n != int64(len(want)) {
		b.t.Fatalf("Count %s = %d, want %d", name, n, len(want))
	}
}

func testListFilters(t *testing.T, f Factory) {
	e := newEnv(t, f)
	t0 := e.now()
	e.submit(norn.NewTask{ID: "qa-1", Queue: "qa", Labels: map[string]string{"tenant": "t1", "kind": "x"}},
		norn.NewTask{ID: "qa-2", Queue: "qa", Labels: map[string]string{"tenant": "t2"}},
		norn.NewTask{ID: "qb-1", Queue: "qb", Labels: map[string]string{"tenant": "t1"}})
	e.clock.Advance(10 * time.Second)
	e.submit(norn.NewTask{ID: "qb-2", Queue: "qb", Labels: map[string]string{"tenant": "t1", "kind": "y"}},
		norn.NewTask{ID: "qc-1", Queue: "qc", Delay: dur(time.Hour)})
	if c := e.claim("w1", "qa"); c.ID != "qa-1" {
		t.Fatalf("claimed %q, want qa-1", c.ID)
	}
	b := e.claim("w2", "qb")
	if b.ID != "qb-1" {
		t.Fatalf("claimed %q, want qb-1", b.ID)
	}
	e.complete(b, "")
	e.clock.Advance(10 * time.Second)
	if _, err := e.s.Cancel(e.ctx, "qa-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Update(e.ctx, "qb-2", norn.Update{Priority: ptr(uint32(3))}); err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(10 * time.Second)
	st := func(s string) []norn.Status {
		v, err := norn.ParseStatuses(s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name string
		f    norn.Filter
		want []string
	}{
		{"all", norn.Filter{}, []string{"qa-1", "qa-2", "qb-1", "qb-2", "qc-1"}},
		{"queue qa", norn.Filter{Queues: []string{"qa"}}, []string{"qa-1", "qa-2"}},
		{"queues qa,qc", norn.Filter{Queues: []string{"qa", "qc"}}, []string{"qa-1", "qa-2", "qc-1"}},
		{"queue unused", norn.Filter{Queues: []string{"zz"}}, nil},
		{"status running", norn.Filter{Statuses: []norn.Status{norn.StatusRunning}}, []string{"qa-1"}},
		{"status scheduled", norn.Filter{Statuses: []norn.Status{norn.StatusScheduled}}, []string{"qc-1"}},
		{"status completed,cancelled", norn.Filter{Statuses: []norn.Status{norn.StatusCompleted, norn.StatusCancelled}}, []string{"qa-2", "qb-1"}},
		{"pending", norn.Filter{Statuses: st("pending")}, []string{"qa-1", "qb-2", "qc-1"}},
		{"terminal", norn.Filter{Statuses: st("terminal")}, []string{"qa-2", "qb-1"}},
		{"succeeded", norn.Filter{Statuses: st("succeeded")}, []string{"qb-1"}},
		{"failed", norn.Filter{Statuses: st("failed")}, nil},
		{"label tenant=t1", norn.Filter{Labels: map[string]string{"tenant": "t1"}}, []string{"qa-1", "qb-1", "qb-2"}},
		{"labels tenant=t1,kind=x", norn.Filter{Labels: map[string]string{"tenant": "t1", "kind": "x"}}, []string{"qa-1"}},
		{"label kind=z", norn.Filter{Labels: map[string]string{"kind": "z"}}, nil},
		{"owner w1", norn.Filter{Owner: "w1"}, []string{"qa-1"}},
		{"owner w2 (last owner)", norn.Filter{Owner: "w2"}, []string{"qb-1"}},
		{"id contains b-", norn.Filter{IDContains: "b-"}, []string{"qb-1", "qb-2"}},
		{"created after", norn.Filter{CreatedAfter: t0.Add(5 * time.Second)}, []string{"qb-2", "qc-1"}},
		{"created before", norn.Filter{CreatedBefore: t0.Add(5 * time.Second)}, []string{"qa-1", "qa-2", "qb-1"}},
		{"created window", norn.Filter{CreatedAfter: t0.Add(-time.Second), CreatedBefore: t0.Add(time.Second)}, []string{"qa-1", "qa-2", "qb-1"}},
		{"updated after", norn.Filter{UpdatedAfter: t1.Add(5 * time.Second)}, []string{"qa-2", "qb-2"}},
		{"updated before", norn.Filter{UpdatedBefore: t1.Add(5 * time.Second)}, []string{"qa-1", "qb-1", "qc-1"}},
		{"combined", norn.Filter{Queues: []string{"qb"}, Labels: map[string]string{"tenant": "t1"}, Statuses: []norn.Status{norn.StatusReady}}, []string{"qb-2"}},
	} {
		e.checkFilter(tc.name, tc.f, tc.want)
	}
}

func testFiltersAgree(t *testing.T, f Factory) {
	e := newEnv(t, f)
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 42))
	queues := []string{"qa", "qb", "qc"}
	var marks []time.Time
	for round := 0; round < 4; round++ {
		marks = append(marks, e.now())
		var nts []norn.NewTask
		for i := 0; i < 100; i++ {
			nt := norn.NewTask{Queue: queues[rng.IntN(3)], Priority: uint32(rng.IntN(4)),
				Labels: map[string]string{"tenant": fmt.Sprintf("t%d", rng.IntN(3))}}
			if rng.IntN(2) == 0 {
				nt.Labels["kind"] = []string{"x", "y"}[rng.IntN(2)]
			}
			if rng.IntN(5) == 0 {
				nt.Delay = dur(time.Hour)
			}
			nts = append(nts, nt)
		}
		e.submit(nts...)
		e.clock.Advance(time.Second)
		for _, w := range []string{"w1", "w2"} {
			ts := e.claimReq(norn.ClaimRequest{Worker: w, Queues: []string{queues[rng.IntN(3)]}, N: 5 + rng.IntN(10)})
			for _, tk := range ts {
				var err error
				switch rng.IntN(5) {
				case 0, 1:
					err = e.s.Complete(e.ctx, ref(tk), nil)
				case 2:
					err = e.s.Abort(e.ctx, ref(tk), norn.ErrorInfo{Code: "x"})
				case 3:
					_, err = e.s.Cancel(e.ctx, tk.ID)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		p, err := e.s.List(e.ctx, norn.Query{Filter: norn.Filter{Queues: []string{queues[rng.IntN(3)]}, Statuses: []norn.Status{norn.StatusReady}}, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range p.Tasks {
			if _, err := e.s.Cancel(e.ctx, tk.ID); err != nil {
				t.Fatal(err)
			}
		}
		e.clock.Advance(time.Second)
	}
	it, err := e.s.Stream(e.ctx, norn.Query{})
	all := collect(t, it, err)
	if len(all) != 400 {
		t.Fatalf("Stream of everything: %d tasks, want 400", len(all))
	}
	st := func(s string) []norn.Status {
		v, _ := norn.ParseStatuses(s)
		return v
	}
	filters := []norn.Filter{
		{},
		{Queues: []string{"qa"}},
		{Queues: []string{"qb", "qc"}},
		{Statuses: st("pending")},
		{Statuses: st("terminal")},
		{Statuses: st("ready,aborted")},
		{Statuses: []norn.Status{norn.StatusRunning}, Queues: []string{"qc"}},
		{Labels: map[string]string{"tenant": "t1"}},
		{Labels: map[string]string{"tenant": "t2", "kind": "x"}},
		{Owner: "w1"},
		{Owner: "w2", Statuses: st("terminal")},
		{IDContains: all[rng.IntN(len(all))].ID[30:]},
		{CreatedAfter: marks[1].Add(500 * time.Millisecond)},
		{CreatedBefore: marks[2].Add(500 * time.Millisecond), Queues: []string{"qa"}},
		{UpdatedAfter: marks[2].Add(500 * time.Millisecond)},
		{UpdatedBefore: marks[3].Add(1500 * time.Millisecond), UpdatedAfter: marks[1].Add(500 * time.Millisecond), Labels: map[string]string{"kind": "y"}},
	}
	for i, fl := range filters {
		var want []string
		wantGroups := map[norn.GroupCount]int64{}
		for _, tk := range all {
			if fl.Match(tk) {
				want = append(want, tk.ID)
				wantGroups[norn.GroupCount{Queue: tk.Queue, Status: tk.Status}]++
			}
		}
		name := fmt.Sprintf("filter %d %+v", i, fl)
		e.checkFilter(name, fl, want)
		groups, err := e.s.CountGrouped(e.ctx, fl)
		if err != nil {
			t.Fatalf("CountGrouped %s: %v", name, err)
		}
		if !sort.SliceIsSorted(groups, func(a, b int) bool {
			if groups[a].Queue != groups[b].Queue {
				return groups[a].Queue < groups[b].Queue
			}
			return norn.StatusIndex(groups[a].Status) < norn.StatusIndex(groups[b].Status)
		}) {
			t.Fatalf("CountGrouped %s not sorted by queue, status: %+v", name, groups)
		}
		if len(groups) != len(wantGroups) {
			t.Fatalf("CountGrouped %s: %d groups %+v, want %d %v", name, len(groups), groups, len(wantGroups), wantGroups)
		}
		for _, g := range groups {
			if w := wantGroups[norn.GroupCount{Queue: g.Queue, Status: g.Status}]; g.Count != w || w == 0 {
				t.Fatalf("CountGrouped %s: %s/%s = %d, want %d", name, g.Queue, g.Status, g.Count, w)
			}
		}
	}
}

// testStreamMemory checks that Stream does not hold its result: heap growth
// while streaming n tasks must stay far below what holding them would take
// (measured by holding a sample).
func testStreamMemory(t *testing.T, f Factory, n int) {
	e := newEnv(t, f)
	spec := json.RawMessage(`{"payload":"` + strings.Repeat("x", 200) + `"}`)
	batch := make([]norn.NewTask, 0, 1000)
	start := time.Now()
	for i := 0; i < n; i++ {
		batch = append(batch, norn.NewTask{Queue: "mem", Spec: spec, Labels: map[string]string{"i": strconv.Itoa(i)}})
		if len(batch) == cap(batch) || i == n-1 {
			e.submit(batch...)
			batch = batch[:0]
		}
	}
	t.Logf("submitted %d tasks in %v", n, time.Since(start))
	start = time.Now()
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	sample := min(5000, n)
	base := heap()
	it, err := e.s.Stream(e.ctx, norn.Query{Limit: sample})
	held := collect(t, it, err)
	if len(held) != sample {
		t.Fatalf("Stream limit %d: %d tasks", sample, len(held))
	}
	h := heap()
	runtime.KeepAlive(held)
	held = nil
	perTask := uint64(512) // floor, in case the sample measurement is noisy
	if h > base && (h-base)/uint64(sample) > perTask {
		perTask = (h - base) / uint64(sample)
	}

	base = heap()
	it, err = e.s.Stream(e.ctx, norn.Query{})
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	defer it.Close()
	var count int
	var peak uint64
	var last string
	for it.Next() {
		tk := it.Item()
		if tk.ID <= last {
			t.Fatalf("Stream out of order: %q after %q", tk.ID, last)
		}
		last = tk.ID
		count++
		if count%(n/10+1) == 0 {
			if h := heap(); h > base && h-base > peak {
				peak = h - base
			}
		}
	}
	if err := it.Err(); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if count != n {
		t.Fatalf("Stream returned %d tasks, want %d", count, n)
	}
	bound := perTask * uint64(n) / 4
	// Background allocations of the process (an in-process server's
	// response buffers, the store's caches) are noise of a few MiB whatever
	// n is; at small n a quarter of the hold cost is within that noise. The
	// floor keeps the test meaningful: it applies only when holding every
	// task would cost more than the floor itself.
	const noiseFloor = 8 << 20
	if bound < noiseFloor && perTask*uint64(n) > noiseFloor {
		bound = noiseFloor
	}
	t.Logf("measured and streamed in %v", time.Since(start))
	t.Logf("streamed %d tasks: peak heap growth %d KiB; holding them would take ~%d KiB (%d B/task); bound %d KiB",
		n, peak>>10, perTask*uint64(n)>>10, perTask, bound>>10)
	if peak > bound {
		t.Fatalf("Stream of %d tasks grew the heap by %d KiB, more than a quarter of holding them all (%d KiB): it is not streaming",
			n, peak>>10, bound>>10)
	}
}
