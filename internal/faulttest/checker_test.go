package faulttest

import (
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// The checker must be able to fail: each case is a history that breaks
// one property, and the clean one breaks none.
func TestCheckHistory(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	assign := func(s float64, l uint64) norn.HistoryEntry {
		return norn.HistoryEntry{Type: norn.TaskAssignment, Time: at(s), Lease: l}
	}
	timeout := func(s float64, l uint64) norn.HistoryEntry {
		return norn.HistoryEntry{Type: norn.TaskTimeout, Time: at(s), Lease: l}
	}
	complete := func(s float64, l uint64) norn.HistoryEntry {
		return norn.HistoryEntry{Type: norn.TaskComplete, Time: at(s), Lease: l}
	}
	for _, tc := range []struct {
		name    string
		hist    []norn.HistoryEntry
		acked   []uint64
		problem string // "" = clean
	}{
		{"clean rerun", []norn.HistoryEntry{assign(0, 1), timeout(2.5, 1), assign(3, 2), complete(3.1, 2)}, []uint64{2}, ""},
		{"assignment while live", []norn.HistoryEntry{assign(0, 1), assign(1, 2), complete(1.5, 2)}, nil, "overlapping leases"},
		{"timeout before the lease ran out", []norn.HistoryEntry{assign(0, 1), timeout(1, 1), assign(1.1, 2), complete(1.5, 2)}, nil, "overlapping leases"},
		{"lease reused", []norn.HistoryEntry{assign(0, 2), timeout(3, 2), assign(3, 2), complete(3.1, 2)}, nil, "overlapping leases"},
		{"two completions", []norn.HistoryEntry{assign(0, 1), complete(0.5, 1), assign(1, 2), complete(1.5, 2)}, nil, "two accepted completions"},
		{"acked under two leases", []norn.HistoryEntry{assign(0, 1), timeout(3, 1), assign(3, 2), complete(3.1, 2)}, []uint64{1, 2}, "two accepted completions"},
		{"acked under a stale lease", []norn.HistoryEntry{assign(0, 1), timeout(3, 1), assign(3, 2), complete(3.1, 2)}, []uint64{1}, "fencing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{}
			r.checkHistory(&norn.Task{ID: "x", Status: norn.StatusCompleted, History: tc.hist}, 2*time.Second, tc.acked)
			ps := r.Problems()
			if tc.problem == "" {
				if len(ps) > 0 {
					t.Fatalf("clean history reported %v", ps)
				}
				return
			}
			if len(ps) == 0 || !strings.HasPrefix(ps[0], tc.problem) {
				t.Fatalf("want %q, got %v", tc.problem, ps)
			}
		})
	}
}

func TestCheckMonitor(t *testing.T) {
	line := func(at time.Time, msg string, start time.Time) logLine {
		rec := map[string]any{"time": at.Format(time.RFC3339Nano), "msg": msg}
		if !start.IsZero() {
			rec["start"] = start.Format(time.RFC3339Nano)
		}
		return logLine{Rec: rec}
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := func(x float64) time.Time { return t0.Add(time.Duration(x * float64(time.Second))) }
	var zero time.Time
	for _, tc := range []struct {
		name    string
		a, b    []logLine
		events  []Event
		problem string
	}{
		{"handover", []logLine{line(s(0), msgLeads, zero), line(s(1), msgSwept, s(0.9)), line(s(2), msgLost, zero)},
			[]logLine{line(s(3), msgLeads, zero), line(s(4), msgSwept, s(3.5))},
			[]Event{{Fault: "pause", Target: "a (leader)", Start: s(1.5), Healed: s(5)}}, ""},
		{"overlapping sweeps", []logLine{line(s(0), msgLeads, zero), line(s(4), msgSwept, s(1))},
			[]logLine{line(s(2), msgLeads, zero), line(s(3), msgSwept, s(2.5))}, nil, "b swept"},
		{"sweep without the lead", []logLine{line(s(1), msgSwept, s(0.5))}, nil, nil, "a swept"},
		{"sweep after losing the lead mid-sweep", []logLine{line(s(0), msgLeads, zero), line(s(1), msgLost+" during a sweep; sweep stopped", zero),
			line(s(3), msgSwept, s(2)), line(s(4), msgLeads, zero)}, nil, nil, "a swept"},
		// a is frozen mid-sweep (0.9 s to 6 s spans the pause from 1 s to
		// 5.5 s) while b takes over and sweeps: not a second sweeper.
		{"frozen leader's sweep spans the pause", []logLine{line(s(0), msgLeads, zero), line(s(6), msgSwept, s(0.9)), line(s(6.1), msgLost, zero)},
			[]logLine{line(s(3), msgLeads, zero), line(s(4), msgSwept, s(3.5))},
			[]Event{{Fault: "pause", Target: "a (leader)", Start: s(1), Healed: s(5.5)}}, ""},
		// CI's case: the resumed node logs its sweep's end (5.49 s) a few
		// milliseconds before the nemesis records that SIGCONT returned
		// (5.5 s); the sweep was still under way when the node was frozen.
		{"frozen sweep ends just before the heal is recorded", []logLine{line(s(0), msgLeads, zero), line(s(5.49), msgSwept, s(0.99)), line(s(5.6), msgLost, zero)},
			[]logLine{line(s(3), msgLeads, zero), line(s(4), msgSwept, s(3.5))},
			[]Event{{Fault: "pause", Target: "a (leader)", Start: s(1), Healed: s(5.5)}}, ""},
		// The soak's case: the nemesis records Start, finds the leader and
		// only then sends SIGSTOP (Injected); the node began a sweep in
		// between (2 ms after Start) and was frozen in it.
		{"frozen sweep begun after the fault's start, before the signal", []logLine{line(s(0), msgLeads, zero), line(s(6), msgSwept, s(1.002)), line(s(6.1), msgLost, zero)},
			[]logLine{line(s(3), msgLeads, zero), line(s(4), msgSwept, s(3.5))},
			[]Event{{Fault: "pause", Target: "a (leader)", Start: s(1), Injected: s(1.01), Healed: s(5.5)}}, ""},
		// A sweep begun after the signal was sent is not the frozen one.
		{"sweep begun after the signal", []logLine{line(s(0), msgLeads, zero), line(s(6), msgSwept, s(1.02))},
			[]logLine{line(s(3), msgLeads, zero), line(s(4), msgSwept, s(3.5))},
			[]Event{{Fault: "pause", Target: "a (leader)", Start: s(1), Injected: s(1.01), Healed: s(5.5)}}, "b swept"},
		// The same overlap without a pause is two sweepers.
		{"overlap without a pause", []logLine{line(s(0), msgLeads, zero), line(s(6), msgSwept, s(0.9))},
			[]logLine{line(s(3), msgLeads, zero), line(s(4), msgSwept, s(3.5))}, nil, "b swept"},
		// The cluster soak that saw "no takeover" twice, replayed: b's
		// term ended in a sweep (a "… during a sweep; sweep stopped"
		// line), a took the lead, and b took it back while a was frozen.
		// A checker that did not see the end of b's first term merged it
		// with the second and found no takeover.
		{"takeover by a node whose last term ended in a sweep",
			[]logLine{line(s(2), msgLeads, zero), line(s(9.8), msgLost, zero)},
			[]logLine{line(s(0), msgLeads, zero), line(s(1), msgLost+" during a sweep; sweep stopped", zero), line(s(7.5), msgLeads, zero)},
			[]Event{{Fault: "pause", Target: "a (leader)", Start: s(2.5), Healed: s(9.5)}}, ""},
		// A node never says it leads twice without losing the lead in
		// between: a second line means the checker missed the end of a
		// term, and it says so instead of merging the two.
		{"a term begins while the node leads", []logLine{line(s(0), msgLeads, zero), line(s(5), msgLeads, zero)}, nil, nil,
			"a logged that it leads at"},
		{"no takeover", []logLine{line(s(0), msgLeads, zero)}, nil,
			[]Event{{Fault: "pause", Target: "a (leader)", Start: s(1), Healed: s(9)}}, "pause: the leader a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Node{Name: "a", lines: tc.a, done: make(chan struct{})}
			b := &Node{Name: "b", lines: tc.b, done: make(chan struct{})}
			mr := CheckMonitor([]*Node{a, b}, tc.events, s(10))
			if tc.problem == "" {
				if len(mr.Problems) > 0 {
					t.Fatalf("clean run reported %v", mr.Problems)
				}
				return
			}
			if len(mr.Problems) == 0 || !strings.HasPrefix(mr.Problems[0], tc.problem) {
				t.Fatalf("want %q, got %v", tc.problem, mr.Problems)
			}
		})
	}
}

// The database-side takeover check fails when the frozen leader's session
// keeps the lock, or nobody takes it, through the whole fault.
func TestCheckLockTakeovers(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := func(x float64) time.Time { return t0.Add(time.Duration(x * float64(time.Second))) }
	pause := []Event{{Fault: "pause", Target: "a (leader)", Start: s(1), Healed: s(9)}}
	for _, tc := range []struct {
		name    string
		holders []string // one sample a second from s(0)
		events  []Event
		problem string
	}{
		{"taken over", []string{"a", "a", "a", "a", "a", "", "b", "b", "b", "b", "b"}, pause, ""},
		{"kept by the frozen leader", []string{"a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "b"}, pause, "pause of a"},
		{"released but not taken", []string{"a", "a", "a", "", "", "", "", "", "", "", "b"}, pause, "pause of a"},
		{"not the leader's fault", []string{"a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a"},
			[]Event{{Fault: "pause", Target: "b", Start: s(1), Healed: s(9)}}, ""},
		{"never held", []string{"", "", ""}, nil, "the database never showed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lw := &LockWatch{}
			for i, h := range tc.holders {
				lw.samples = append(lw.samples, holdSample{at: s(float64(i)), holder: h})
			}
			r := CheckLockTakeovers(lw, tc.events)
			if tc.problem == "" {
				if len(r.Problems) > 0 {
					t.Fatalf("clean run reported %v", r.Problems)
				}
				return
			}
			if len(r.Problems) == 0 || !strings.HasPrefix(r.Problems[0], tc.problem) {
				t.Fatalf("want %q, got %v", tc.problem, r.Problems)
			}
		})
	}
}

// tasks is a store listing for check.
type tasks struct {
	ts  []*norn.Task
	cur *norn.Task
}

func (l *tasks) Next() bool {
	if len(l.ts) == 0 {
		return false
	}
	l.cur, l.ts = l.ts[0], l.ts[1:]
	return true
}
func (l *tasks) Item() *norn.Task { return l.cur }
func (l *tasks) Err() error       { return nil }
func (l *tasks) Close() error     { return nil }

// What a failover to an asynchronous standby can do is each detected,
// counted as a loss (Problems) and not as a broken invariant
// (Invariants); a task listed twice is broken whatever was lost.
func TestCheckLosses(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	done := func(id string, lease uint64) *norn.Task {
		return &norn.Task{ID: id, Status: norn.StatusCompleted, History: []norn.HistoryEntry{
			{Type: norn.TaskAssignment, Time: t0, Lease: lease}, {Type: norn.TaskComplete, Time: t0.Add(time.Millisecond), Lease: lease}}}
	}
	for _, tc := range []struct {
		name    string
		listed  []*norn.Task
		acked   []string // acknowledged submits ("a" is always sent and acknowledged)
		claims  [][2]any // (id, lease) handed out, in order, each followed by its completion
		problem string   // the one problem Problems reports ("" clean)
		broken  bool     // Invariants reports it too
		missing int
	}{
		{"clean", []*norn.Task{done("a", 1)}, nil, [][2]any{{"a", uint64(1)}}, "", false, 0},
		{"submit lost", []*norn.Task{done("a", 1)}, []string{"b"}, [][2]any{{"a", uint64(1)}}, "lost", false, 1},
		{"completion lost, ran again", []*norn.Task{done("a", 2)}, nil, [][2]any{{"a", uint64(1)}, {"a", uint64(2)}}, "ran again after an acknowledged completion", false, 0},
		// The store lost the lease with the completion and handed its number out again.
		{"lease number reissued", []*norn.Task{done("a", 1)}, nil, [][2]any{{"a", uint64(1)}, {"a", uint64(1)}}, "two accepted completions", false, 0},
		{"listed twice", []*norn.Task{done("a", 1), done("a", 1)}, nil, [][2]any{{"a", uint64(1)}}, "listed twice", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWorkload(nil, 2*time.Second)
			for _, id := range append([]string{"a"}, tc.acked...) {
				w.attempted[id], w.acked[id] = true, true
			}
			for _, c := range tc.claims {
				id, lease := c[0].(string), c[1].(uint64)
				// As Work records a claim, then its acknowledged completion.
				if len(w.completed[id]) > 0 {
					w.ranAgain[id] = append(w.ranAgain[id], lease)
				}
				w.claims[id] = append(w.claims[id], lease)
				w.completed[id] = append(w.completed[id], lease)
			}
			r, err := check(&tasks{ts: tc.listed}, w)
			if err != nil {
				t.Fatal(err)
			}
			if r.Missing != tc.missing {
				t.Errorf("missing %d, want %d", r.Missing, tc.missing)
			}
			ps, inv := r.Problems(), r.Invariants()
			if tc.problem == "" {
				if len(ps) > 0 {
					t.Fatalf("clean run reported %v", ps)
				}
				return
			}
			found := false
			for _, p := range ps {
				found = found || strings.HasPrefix(p, tc.problem)
			}
			if !found {
				t.Fatalf("want %q, got %v", tc.problem, ps)
			}
			if (len(inv) > 0) != tc.broken {
				t.Fatalf("invariants broken: %v, want %v", inv, tc.broken)
			}
		})
	}
}
