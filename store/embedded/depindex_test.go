package embedded

import (
	"slices"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// checkDepIndex compares the depends_on index with what the tasks on disk
// say, so a path that forgets to maintain it shows up whatever the filter
// tests happen to ask.
func checkDepIndex(t *testing.T, s *Store) {
	t.Helper()
	want := map[string][]string{}
	it, err := s.Stream(bg, norn.Query{})
	if err != nil {
		t.Fatal(err)
	}
	for it.Next() {
		tk := it.Item()
		for _, d := range tk.DependsOn {
			want[d] = append(want[d], tk.ID)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	got := map[string][]string{}
	for d, ts := range s.byDep {
		for _, tk := range ts {
			got[d] = append(got[d], tk.id)
		}
	}
	nDepsOf := len(s.depsOf)
	s.mu.Unlock()
	withDeps := map[string]bool{}
	for d := range want {
		slices.Sort(want[d])
		slices.Sort(got[d])
		for _, id := range want[d] {
			withDeps[id] = true
		}
	}
	if len(got) != len(want) || nDepsOf != len(withDeps) {
		t.Fatalf("index %v (%d tasks with deps), disk %v (%d)", got, nDepsOf, want, len(withDeps))
	}
	for d := range want {
		if !slices.Equal(got[d], want[d]) {
			t.Fatalf("dependents of %q: index %v, disk %v", d, got[d], want[d])
		}
	}
}

func dependents(t *testing.T, s *Store, f norn.Filter) []string {
	t.Helper()
	p, err := s.List(bg, norn.Query{Filter: f, Summary: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tk := range p.Tasks {
		ids = append(ids, tk.ID)
	}
	n, err := s.Count(bg, f)
	if err != nil || n != int64(len(ids)) {
		t.Fatalf("Count(%+v) = %d, %v; List found %v", f, n, err, ids)
	}
	return ids
}

// TestDependsOnIndex: the index follows submits (also the ones a failed
// transaction takes back), deletes and purges, survives the dependency's
// completion and a reopen.
func TestDependsOnIndex(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := newFakeClock()
	s, err := Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	mustSubmit(t, s, norn.NewTask{ID: "p", Queue: "q"}, norn.NewTask{ID: "x", Queue: "q"},
		norn.NewTask{ID: "k1", Queue: "q", DependsOn: []string{"p"}},
		norn.NewTask{ID: "k2", Queue: "r", DependsOn: []string{"x", "p"}},
		norn.NewTask{ID: "k3", Queue: "r", DependsOn: []string{"x"}})
	checkDepIndex(t, s)
	// A transaction that fails (after its submit and first delete) leaves
	// no trace in the index.
	_, err = s.Transact(bg, norn.Txn{Submit: []norn.NewTask{{ID: "k4", Queue: "q", DependsOn: []string{"p"}}},
		Delete: []string{"k3", "nope"}})
	if norn.CodeOf(err) != norn.CodeNotFound {
		t.Fatalf("transaction deleting a missing task: %v, want not_found", err)
	}
	checkDepIndex(t, s)
	if got := dependents(t, s, norn.Filter{DependsOn: "p"}); !slices.Equal(got, []string{"k1", "k2"}) {
		t.Fatalf("dependents of p: %v", got)
	}
	// The dependency completes; its dependents are still its dependents.
	w, _ := s.RegisterWorker(bg, norn.WorkerInfo{Name: "w"})
	for _, tk := range mustClaim(t, s, w, 2, "q") {
		if err := s.Complete(bg, refOf(tk), nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := dependents(t, s, norn.Filter{DependsOn: "p", Statuses: []norn.Status{norn.StatusReady}}); !slices.Equal(got, []string{"k1", "k2"}) {
		t.Fatalf("ready dependents of p after it completed: %v", got)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true}); err != nil {
		t.Fatal(err)
	}
	checkDepIndex(t, s)
	if got := dependents(t, s, norn.Filter{DependsOn: "x", Queues: []string{"r"}}); !slices.Equal(got, []string{"k2", "k3"}) {
		t.Fatalf("dependents of x after reopen: %v", got)
	}
	// Purged by retention: the completed p and x go, their dependents
	// stay listed under their ids; a deleted dependent leaves the index.
	day := norn.Duration(time.Hour)
	if _, err := s.UpdateQueue(bg, "q", norn.QueueUpdate{Retention: &norn.Retention{Completed: day, Aborted: day, Cancelled: day}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Hour)
	if rep, err := s.Sweep(bg); err != nil || rep.Purged != 2 {
		t.Fatalf("sweep %+v, %v; want 2 purged", rep, err)
	}
	if err := s.Delete(bg, "k1"); err != nil {
		t.Fatal(err)
	}
	checkDepIndex(t, s)
	if got := dependents(t, s, norn.Filter{DependsOn: "p"}); !slices.Equal(got, []string{"k2"}) {
		t.Fatalf("dependents of the purged p: %v", got)
	}
}
