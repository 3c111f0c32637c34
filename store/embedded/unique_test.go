package embedded

import (
	"testing"
	"time"

	"github.com/nornq/norn"
)

// TestUniqueIndexRebuiltAtOpen: the unique-key index lives in memory; after
// a reopen it holds the same keys (live holders, ended ones within
// unique_for, none for deleted tasks).
func TestUniqueIndexRebuiltAtOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clock := newFakeClock()
	open := func() *Store {
		s, err := Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	mustSubmit(t, s,
		norn.NewTask{ID: "live", Queue: "q", UniqueKey: "k-live"},
		norn.NewTask{ID: "ended", Queue: "q", UniqueKey: "k-ended"},
		norn.NewTask{ID: "deleted", Queue: "q", UniqueKey: "k-deleted"},
	)
	if _, err := s.Cancel(bg, "ended"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(bg, "deleted"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open()
	defer s.Close()
	clock.mu.Lock()
	clock.now = clock.now.Add(time.Minute)
	clock.mu.Unlock()
	res, err := s.Submit(bg,
		norn.NewTask{Queue: "q", UniqueKey: "k-live"},
		norn.NewTask{Queue: "q", UniqueKey: "k-ended", UniqueFor: norn.Duration(time.Hour)},
		norn.NewTask{Queue: "q", UniqueKey: "k-deleted", UniqueFor: norn.Duration(time.Hour)},
	)
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Duplicate || res[0].Task.ID != "live" || !res[1].Duplicate || res[1].Task.ID != "ended" || res[2].Duplicate {
		t.Fatalf("after reopen: %v %v %v", res[0], res[1], res[2])
	}
	if res[0].Task.UniqueKey != "k-live" {
		t.Fatalf("reopened task lost its key: %+v", res[0].Task)
	}
}
