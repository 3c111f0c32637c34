package embedded

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/storetest"
)

// wantEntry is what a test expects of one history entry.
type wantEntry struct {
	typ      norn.HistoryType
	worker   string
	lease    uint64
	progress float64
	at       time.Time
}

func checkHistory(t *testing.T, where string, tk *norn.Task, want []wantEntry, limit int) {
	t.Helper()
	keep := want
	if len(keep) > limit {
		keep = keep[len(keep)-limit:]
	}
	if len(tk.History) != len(keep) || tk.HistoryDropped != len(want)-len(keep) {
		t.Fatalf("%s: %d entries, %d dropped; want %d, %d: %+v", where, len(tk.History), tk.HistoryDropped,
			len(keep), len(want)-len(keep), tk.History)
	}
	for i, w := range keep {
		h := tk.History[i]
		if h.Type != w.typ || h.Worker != w.worker || h.Lease != w.lease || h.Progress != w.progress ||
			!h.Time.Equal(w.at) || h.Error != nil {
			t.Fatalf("%s: entry %d is %+v, want %+v", where, i, h, w)
		}
	}
}

// A claim's assignment and the completion of the same lease are stood for
// by the task's state record instead of history keys of their own (see
// settleImplied): the history reads the same, entry for entry, through
// Get, List and a claim, before and after a reopen, under any cap, and
// while entries move from the state record to history keys.
func TestImpliedHistoryReadsAsWritten(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{1, 2, 3, 4, 100} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			t.Parallel()
			clock := storetest.NewFakeClock()
			dir := t.TempDir()
			s, err := Open(bg, Options{Dir: dir, Clock: clock, ManualSweep: true, HistoryLimit: limit})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { s.Close() }()
			mustSubmit(t, s, norn.NewTask{ID: "x", Queue: "q"})
			var want []wantEntry
			read := func(where string) {
				t.Helper()
				tk, err := s.Get(bg, "x")
				if err != nil {
					t.Fatal(err)
				}
				checkHistory(t, where+" (Get)", tk, want, limit)
				page, err := s.List(bg, norn.Query{Filter: norn.Filter{Queues: []string{"q"}}})
				if err != nil || len(page.Tasks) != 1 {
					t.Fatalf("%s: List: %v %v", where, page.Tasks, err)
				}
				checkHistory(t, where+" (List)", page.Tasks[0], want, limit)
			}
			claim := func(worker string) *norn.Task {
				t.Helper()
				clock.Advance(time.Second)
				tk := mustClaim(t, s, worker, 1, "q")[0]
				want = append(want, wantEntry{norn.TaskAssignment, worker, tk.Lease, 0, clock.Now()})
				checkHistory(t, "claim by "+worker, tk, want, limit)
				return tk
			}
			tk := claim("w1")
			read("claimed")
			clock.Advance(time.Second)
			p := 0.5
			if _, err := s.Heartbeat(bg, refOf(tk), norn.Heartbeat{Progress: &p}); err != nil {
				t.Fatal(err)
			}
			read("heartbeat")
			clock.Advance(time.Second)
			if err := s.Yield(bg, refOf(tk)); err != nil {
				t.Fatal(err)
			}
			want = append(want, wantEntry{norn.TaskYield, "w1", tk.Lease, 0.5, clock.Now()})
			read("yielded")
			tk = claim("w2")
			if s, err = reopenAt(s, dir, clock, limit); err != nil {
				t.Fatal(err)
			}
			read("claimed, reopened")
			// A cancel appends an entry of its own: the implied assignment
			// is written out below it.
			clock.Advance(time.Second)
			if _, err := s.Cancel(bg, "x"); err != nil {
				t.Fatal(err)
			}
			want = append(want, wantEntry{norn.TaskCancel, "w2", tk.Lease, 0, clock.Now()})
			read("cancelled")
			clock.Advance(time.Second)
			if _, err := s.Retry(bg, "x", norn.RetryOptions{}); err != nil {
				t.Fatal(err)
			}
			want = append(want, wantEntry{norn.TaskRedrive, "", 0, 0, clock.Now()})
			read("retried")
			tk = claim("w3")
			clock.Advance(time.Second)
			if err := s.Complete(bg, refOf(tk), nil); err != nil {
				t.Fatal(err)
			}
			want = append(want, wantEntry{norn.TaskComplete, "w3", tk.Lease, 1, clock.Now()})
			read("completed")
			if s, err = reopenAt(s, dir, clock, limit); err != nil {
				t.Fatal(err)
			}
			read("completed, reopened")
			// A repeated completion is recognised by the completion the
			// state record stands for.
			if err := s.Complete(bg, refOf(tk), nil); err != nil {
				t.Fatalf("repeated complete: %v", err)
			}
			if err := s.Yield(bg, refOf(tk)); err == nil {
				t.Fatal("a yield after the completion was taken for a repeat")
			}
			read("repeated")
			if n := historyKeys(t, s, "x"); n > limit {
				t.Fatalf("%d history keys on disk, more than the cap of %d", n, limit)
			}
		})
	}
}

func reopenAt(s *Store, dir string, clock norn.Clock, limit int) (*Store, error) {
	if err := s.Close(); err != nil {
		return nil, err
	}
	return Open(context.Background(), Options{Dir: dir, Clock: clock, ManualSweep: true, HistoryLimit: limit})
}

func historyKeys(t *testing.T, s *Store, id string) int {
	t.Helper()
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		if kid, suf, _ := splitTaskKey(it.Key()); kid == id && len(suf) > 0 && suf[0] == sufHistory {
			n++
		}
	}
	return n
}

// A transition that changes what an implied entry is read from without
// appending history writes the entry out as it was; and a claim of a
// task whose record still stands for entries (its view of the database
// does not hold the claim's own batch, which writes them out) reads them.
func TestImpliedEntriesWrittenOutWhenTheirFieldsChange(t *testing.T) {
	t.Parallel()
	clock := storetest.NewFakeClock()
	s := newTestStore(t, Options{Clock: clock, ManualSweep: true})
	mustSubmit(t, s, norn.NewTask{ID: "x", Queue: "q"})
	tk := mustClaim(t, s, "w1", 1, "q")[0]
	claimedAt := clock.Now()
	clock.Advance(time.Second)
	// Back to ready under another owner and lease, with the assignment
	// still implied (no store operation does this; it stands for any
	// future one that changes these fields without history).
	err := s.run(func(tx *txn) error {
		t := s.tasks.get("x")
		ns := tx.touch(t)
		ns.owner, ns.lease, ns.status, ns.readyAt = "other", ns.lease+1, stReady, tx.now
		tx.set(t, ns)
		if t.st.implied != 0 {
			return fmt.Errorf("implied %b kept for changed fields", t.st.implied)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	first := []wantEntry{{norn.TaskAssignment, "w1", tk.Lease, 0, claimedAt}}
	got, _ := s.Get(bg, "x")
	checkHistory(t, "after the change", got, first, 100)

	// A ready task whose record stands for an entry, claimed.
	err = s.run(func(tx *txn) error {
		t := s.tasks.get("x")
		ns := tx.touch(t)
		h := norn.HistoryEntry{Type: norn.TaskAssignment, Worker: ns.owner, Lease: ns.lease}
		ns.started = tx.now
		seq, implied := tx.nextHistory(&ns, &h)
		if !implied {
			return fmt.Errorf("entry %+v not implied", h)
		}
		tx.set(t, ns)
		tx.appendHistory(t, seq, implied, h)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	second := append(first, wantEntry{norn.TaskAssignment, "other", tk.Lease + 1, 0, clock.Now()})
	clock.Advance(time.Second)
	tk = mustClaim(t, s, "w2", 1, "q")[0]
	all := append(second, wantEntry{norn.TaskAssignment, "w2", tk.Lease, 0, clock.Now()})
	checkHistory(t, "claim", tk, all, 100)
	got, _ = s.Get(bg, "x")
	checkHistory(t, "read after the claim", got, all, 100)
}
