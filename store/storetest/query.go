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

// ordered submits t-00 … t-24 out of id order, priority i%4, spec {"i":i},
// and returns their ids in each order.
func ordered(b *testBundle) map[norn.Order][]string {
	var nts []norn.NewTask
	for k := 0; k < 25; k++ {
		i := k * 7 % 25 // submission order differs from id order
		nts = append(nts, norn.NewTask{ID: fmt.Sprintf("t-%02d", i), Queue: "q", Priority: uint32(i % 4),
			Spec: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))})
	}
	b.submit(nts...)
	var asc []string
	for i := 0; i < 25; i++ {
		asc = append(asc, fmt.Sprintf("t-%02d", i))
	}
	desc := append([]string(nil), asc...)
	sort.Sort(sort.Reverse(sort.StringSlice(desc)))
	prio := append([]string(nil), asc...)
	sort.SliceStable(prio, func(x, y int) bool { return prioOf(prio[x]) > prioOf(prio[y]) })
	return map[norn.Order][]string{norn.OrderID: asc, norn.OrderNewest: desc, norn.OrderPriority: prio}
}

func prioOf(id string) int {
	i, _ := strconv.Atoi(id[2:])
	return i % 4
}

var orders = []struct {
	name  string
	order norn.Order
}{{"ByID", norn.OrderID}, {"NewestFirst", norn.OrderNewest}, {"ByPriority", norn.OrderPriority}}

func exerciseList(t *testing.T, setup setupFunc) {
	t.Run("List", func(t *testing.T) {
		t.Parallel()

		for _, o := range orders {
			t.Run("Pages"+o.name+"AtEveryPageSize", func(t *testing.T) {
				t.Parallel()
				_, b := setup(t)
				want := ordered(b)[o.order]
				for _, limit := range []int{1, 7, 25, 1000} {
					eqStrings(t, fmt.Sprintf("List order %q limit %d", o.order, limit), ids(b.listAll(norn.Query{Order: o.order, Limit: limit})), want)
				}
			})
		}

		t.Run("PageAfterAnExactlyFullLastPageIsEmpty", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			ordered(b)
			p, err := s.List(b.ctx, norn.Query{Limit: 25})
			if err != nil || len(p.Tasks) != 25 {
				t.Fatalf("List limit 25: %d tasks, %v", len(p.Tasks), err)
			}
			if p.NextCursor != "" {
				// A cursor at the end is allowed, but must then yield an empty last page.
				p2, err := s.List(b.ctx, norn.Query{Limit: 25, Cursor: p.NextCursor})
				if err != nil || len(p2.Tasks) != 0 || p2.NextCursor != "" {
					t.Fatalf("page after the last: %d tasks, cursor %q, %v", len(p2.Tasks), p2.NextCursor, err)
				}
			}
			jsonEq(t, "listed spec", p.Tasks[3].Spec, `{"i":3}`)
		})

		t.Run("DefaultPageHolds100", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			var nts []norn.NewTask
			for i := 0; i < 130; i++ {
				nts = append(nts, norn.NewTask{ID: fmt.Sprintf("u-%03d", i), Queue: "q"})
			}
			b.submit(nts...)
			p, err := s.List(b.ctx, norn.Query{})
			if err != nil || len(p.Tasks) != norn.DefaultListLimit || p.NextCursor == "" {
				t.Fatalf("List with default limit: %d tasks, cursor %q, %v; want %d and a cursor", len(p.Tasks), p.NextCursor, err, norn.DefaultListLimit)
			}
		})

		t.Run("SummaryDropsOnlySpecResultErrorsAndHistory", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			full, q := summarised(b)
			p, err := s.List(b.ctx, norn.Query{Filter: q.Filter, Summary: true})
			if err != nil || len(p.Tasks) != 1 {
				t.Fatalf("List summary: %v, %v", p.Tasks, err)
			}
			sameTask(t, "List summary view", full.Summary(), p.Tasks[0])
			p, err = s.List(b.ctx, norn.Query{Filter: q.Filter})
			if err != nil || len(p.Tasks) != 1 {
				t.Fatalf("List full: %v, %v", p.Tasks, err)
			}
			sameTask(t, "List full view", full, p.Tasks[0])
		})

		t.Run("RefusesAMalformedCursor", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			_, err := s.List(b.ctx, norn.Query{Cursor: "not a cursor!"})
			wantField(t, "List with malformed cursor", err, norn.ErrInvalidArgument, "cursor")
		})
	})
}

// summarised completes one task with a result, among others, and returns it
// and a query selecting only it.
func summarised(b *testBundle) (*norn.Task, norn.Query) {
	b.submit(norn.NewTask{ID: "s-1", Queue: "q", Spec: json.RawMessage(`{"a":1}`), Labels: map[string]string{"k": "v"}},
		norn.NewTask{ID: "s-2", Queue: "q"})
	c := b.claim("w", "q")
	b.complete(c, `{"ok":true}`)
	return b.get(c.ID), norn.Query{Filter: norn.Filter{IDContains: c.ID}}
}

// exerciseStream runs first and not in parallel with anything: the memory
// measurement would be meaningless next to other subtests.
func exerciseStream(t *testing.T, setup setupFunc, memoryTasks int) {
	t.Run("Stream", func(t *testing.T) {
		t.Run("UsesConstantMemory", func(t *testing.T) {
			_, b := setup(t)
			streamMemory(b, memoryTasks)
		})

		for _, o := range orders {
			t.Run("Returns"+o.name+"UpToALimit", func(t *testing.T) {
				t.Parallel()
				s, b := setup(t)
				want := ordered(b)[o.order]
				it, err := s.Stream(b.ctx, norn.Query{Order: o.order})
				eqStrings(t, fmt.Sprintf("Stream order %q", o.order), ids(collect(t, it, err)), want)
				it, err = s.Stream(b.ctx, norn.Query{Order: o.order, Limit: 10})
				eqStrings(t, fmt.Sprintf("Stream order %q limit 10", o.order), ids(collect(t, it, err)), want[:10])
			})
		}

		t.Run("SummaryDropsOnlySpecResultErrorsAndHistory", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			full, q := summarised(b)
			q.Summary = true
			it, err := s.Stream(b.ctx, q)
			st := collect(t, it, err)
			if len(st) != 1 {
				t.Fatalf("Stream summary: %d tasks", len(st))
			}
			sameTask(t, "Stream summary view", full.Summary(), st[0])
		})
	})
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

func statuses(t *testing.T, s string) []norn.Status {
	t.Helper()
	v, err := norn.ParseStatuses(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func exerciseFilter(t *testing.T, setup setupFunc) {
	t.Run("Filter", func(t *testing.T) {
		t.Parallel()
		exerciseFilterFields(t, setup)
		exerciseFilterAgreement(t, setup)
	})
}

func exerciseFilterFields(t *testing.T, setup setupFunc) {
	// Each row is checked through List (paged), Stream and Count.
	t.Run("SelectsByEveryField", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		t0 := b.now()
		b.submit(norn.NewTask{ID: "qa-1", Queue: "qa", Labels: map[string]string{"tenant": "t1", "kind": "x"}},
			norn.NewTask{ID: "qa-2", Queue: "qa", Labels: map[string]string{"tenant": "t2"}},
			norn.NewTask{ID: "qb-1", Queue: "qb", Labels: map[string]string{"tenant": "t1"}})
		b.clock.Advance(10 * time.Second)
		b.submit(norn.NewTask{ID: "qb-2", Queue: "qb", Labels: map[string]string{"tenant": "t1", "kind": "y"}},
			norn.NewTask{ID: "qc-1", Queue: "qc", Delay: dur(time.Hour)})
		b.claimID("w1", "qa-1", "qa")
		b.complete(b.claimID("w2", "qb-1", "qb"), "")
		b.clock.Advance(10 * time.Second)
		b.cancel("qa-2")
		b.update("qb-2", norn.Update{Priority: ptr(uint32(3))})
		t1 := t0.Add(10 * time.Second)
		for _, tc := range []struct {
			name string
			f    norn.Filter
			want []string
		}{
			{"Empty", norn.Filter{}, []string{"qa-1", "qa-2", "qb-1", "qb-2", "qc-1"}},
			{"Queue", norn.Filter{Queues: []string{"qa"}}, []string{"qa-1", "qa-2"}},
			{"TwoQueues", norn.Filter{Queues: []string{"qa", "qc"}}, []string{"qa-1", "qa-2", "qc-1"}},
			{"UnusedQueue", norn.Filter{Queues: []string{"zz"}}, nil},
			{"StatusRunning", norn.Filter{Statuses: []norn.Status{norn.StatusRunning}}, []string{"qa-1"}},
			{"StatusScheduled", norn.Filter{Statuses: []norn.Status{norn.StatusScheduled}}, []string{"qc-1"}},
			{"TwoStatuses", norn.Filter{Statuses: []norn.Status{norn.StatusCompleted, norn.StatusCancelled}}, []string{"qa-2", "qb-1"}},
			{"AliasPending", norn.Filter{Statuses: statuses(t, "pending")}, []string{"qa-1", "qb-2", "qc-1"}},
			{"AliasTerminal", norn.Filter{Statuses: statuses(t, "terminal")}, []string{"qa-2", "qb-1"}},
			{"AliasSucceeded", norn.Filter{Statuses: statuses(t, "succeeded")}, []string{"qb-1"}},
			{"AliasFailed", norn.Filter{Statuses: statuses(t, "failed")}, nil},
			{"Label", norn.Filter{Labels: map[string]string{"tenant": "t1"}}, []string{"qa-1", "qb-1", "qb-2"}},
			{"TwoLabels", norn.Filter{Labels: map[string]string{"tenant": "t1", "kind": "x"}}, []string{"qa-1"}},
			{"UnusedLabel", norn.Filter{Labels: map[string]string{"kind": "z"}}, nil},
			{"Owner", norn.Filter{Owner: "w1"}, []string{"qa-1"}},
			{"LastOwnerOfAFinishedTask", norn.Filter{Owner: "w2"}, []string{"qb-1"}},
			{"IDContains", norn.Filter{IDContains: "b-"}, []string{"qb-1", "qb-2"}},
			{"CreatedAfter", norn.Filter{CreatedAfter: t0.Add(5 * time.Second)}, []string{"qb-2", "qc-1"}},
			{"CreatedBefore", norn.Filter{CreatedBefore: t0.Add(5 * time.Second)}, []string{"qa-1", "qa-2", "qb-1"}},
			{"CreatedWindow", norn.Filter{CreatedAfter: t0.Add(-time.Second), CreatedBefore: t0.Add(time.Second)}, []string{"qa-1", "qa-2", "qb-1"}},
			{"UpdatedAfter", norn.Filter{UpdatedAfter: t1.Add(5 * time.Second)}, []string{"qa-2", "qb-2"}},
			{"UpdatedBefore", norn.Filter{UpdatedBefore: t1.Add(5 * time.Second)}, []string{"qa-1", "qb-1", "qc-1"}},
			{"QueueLabelAndStatus", norn.Filter{Queues: []string{"qb"}, Labels: map[string]string{"tenant": "t1"}, Statuses: []norn.Status{norn.StatusReady}}, []string{"qb-2"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				b.with(t).checkFilter(tc.name, tc.f, tc.want)
			})
		}
	})
}

func exerciseFilterAgreement(t *testing.T, setup setupFunc) {
	// Random tasks in every status; each row checks List, Stream, Count
	// and CountGrouped against norn.Filter.Match over everything stored.
	t.Run("ListStreamCountAndCountGroupedAgreeWithMatch", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		all, marks, rng := randomTasks(b)
		filters := []struct {
			name string
			f    norn.Filter
		}{
			{"Everything", norn.Filter{}},
			{"Queue", norn.Filter{Queues: []string{"qa"}}},
			{"TwoQueues", norn.Filter{Queues: []string{"qb", "qc"}}},
			{"AliasPending", norn.Filter{Statuses: statuses(t, "pending")}},
			{"AliasTerminal", norn.Filter{Statuses: statuses(t, "terminal")}},
			{"StatusList", norn.Filter{Statuses: statuses(t, "ready,aborted")}},
			{"StatusAndQueue", norn.Filter{Statuses: []norn.Status{norn.StatusRunning}, Queues: []string{"qc"}}},
			{"Label", norn.Filter{Labels: map[string]string{"tenant": "t1"}}},
			{"TwoLabels", norn.Filter{Labels: map[string]string{"tenant": "t2", "kind": "x"}}},
			{"Owner", norn.Filter{Owner: "w1"}},
			{"OwnerAndAlias", norn.Filter{Owner: "w2", Statuses: statuses(t, "terminal")}},
			{"IDContains", norn.Filter{IDContains: all[rng.IntN(len(all))].ID[30:]}},
			{"CreatedAfter", norn.Filter{CreatedAfter: marks[1].Add(500 * time.Millisecond)}},
			{"CreatedBeforeAndQueue", norn.Filter{CreatedBefore: marks[2].Add(500 * time.Millisecond), Queues: []string{"qa"}}},
			{"UpdatedAfter", norn.Filter{UpdatedAfter: marks[2].Add(500 * time.Millisecond)}},
			{"UpdatedWindowAndLabel", norn.Filter{UpdatedBefore: marks[3].Add(1500 * time.Millisecond), UpdatedAfter: marks[1].Add(500 * time.Millisecond), Labels: map[string]string{"kind": "y"}}},
		}
		for _, tc := range filters {
			fl := tc.f
			t.Run(tc.name, func(t *testing.T) {
				b := b.with(t)
				var want []string
				wantGroups := map[norn.GroupCount]int64{}
				for _, tk := range all {
					if fl.Match(tk) {
						want = append(want, tk.ID)
						wantGroups[norn.GroupCount{Queue: tk.Queue, Status: tk.Status}]++
					}
				}
				name := fmt.Sprintf("filter %+v", fl)
				b.checkFilter(name, fl, want)
				groups, err := s.CountGrouped(b.ctx, fl)
				if err != nil {
					t.Fatalf("CountGrouped %s: %v", name, err)
				}
				if !sort.SliceIsSorted(groups, func(x, y int) bool {
					if groups[x].Queue != groups[y].Queue {
						return groups[x].Queue < groups[y].Queue
					}
					return norn.StatusIndex(groups[x].Status) < norn.StatusIndex(groups[y].Status)
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
			})
		}
	})
}

// randomTasks stores 400 tasks over four rounds, claimed, finished and
// cancelled at random (the seed is logged), and returns them all, the time
// each round began and the generator for further choices.
func randomTasks(b *testBundle) ([]*norn.Task, []time.Time, *rand.Rand) {
	t, s := b.t, b.s
	seed := uint64(time.Now().UnixNano())
	t.Logf("random seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 42))
	queues := []string{"qa", "qb", "qc"}
	var marks []time.Time
	for round := 0; round < 4; round++ {
		marks = append(marks, b.now())
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
		b.submit(nts...)
		b.clock.Advance(time.Second)
		for _, w := range []string{"w1", "w2"} {
			ts := b.claimReq(norn.ClaimRequest{Worker: w, Queues: []string{queues[rng.IntN(3)]}, N: 5 + rng.IntN(10)})
			for _, tk := range ts {
				var err error
				switch rng.IntN(5) {
				case 0, 1:
					err = s.Complete(b.ctx, ref(tk), nil)
				case 2:
					err = s.Abort(b.ctx, ref(tk), norn.ErrorInfo{Code: "x"})
				case 3:
					_, err = s.Cancel(b.ctx, tk.ID)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		p, err := s.List(b.ctx, norn.Query{Filter: norn.Filter{Queues: []string{queues[rng.IntN(3)]}, Statuses: []norn.Status{norn.StatusReady}}, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, tk := range p.Tasks {
			b.cancel(tk.ID)
		}
		b.clock.Advance(time.Second)
	}
	it, err := s.Stream(b.ctx, norn.Query{})
	all := collect(t, it, err)
	if len(all) != 400 {
		t.Fatalf("Stream of everything: %d tasks, want 400", len(all))
	}
	return all, marks, rng
}

// streamMemory checks that Stream does not hold its result: heap growth
// while streaming n tasks must stay far below what holding them would take
// (measured by holding a sample).
func streamMemory(b *testBundle, n int) {
	t := b.t
	spec := json.RawMessage(`{"payload":"` + strings.Repeat("x", 200) + `"}`)
	batch := make([]norn.NewTask, 0, 1000)
	start := time.Now()
	for i := 0; i < n; i++ {
		batch = append(batch, norn.NewTask{Queue: "mem", Spec: spec, Labels: map[string]string{"i": strconv.Itoa(i)}})
		if len(batch) == cap(batch) || i == n-1 {
			b.submit(batch...)
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
	it, err := b.s.Stream(b.ctx, norn.Query{Limit: sample})
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
	it, err = b.s.Stream(b.ctx, norn.Query{})
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
