package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// exerciseDebounce: on_duplicate replace replaces a holder that has not
// started and queues one successor to a holder that has.
func exerciseDebounce(t *testing.T, setup setupFunc) {
	t.Run("Debounce", func(t *testing.T) {
		t.Parallel()
		debounceInPlace(t, setup)
		debounceSuccessors(t, setup)
		debounceOthers(t, setup)
	})
}

func debounceInPlace(t *testing.T, setup setupFunc) {
	t.Run("ReplacesAWaitingHolderInPlace", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		first := b.now()
		b.submit(norn.NewTask{ID: "h", Queue: "q", UniqueKey: "k", Spec: json.RawMessage(`{"v":1}`),
			Labels: map[string]string{"a": "1"}, Delay: dur(2 * time.Second)})
		b.advance(time.Second)
		res, err := s.Submit(b.ctx, norn.NewTask{Queue: "q", UniqueKey: "k", OnDuplicate: norn.DuplicateReplace,
			Spec: json.RawMessage(`{"v":2}`), Labels: map[string]string{"b": "2"}, Priority: 5, Delay: dur(2 * time.Second)})
		b.must(err, "Submit(replace)")
		got := res[0]
		if !got.Duplicate || !got.Replaced || got.Task.ID != "h" {
			t.Fatalf("answer %+v (task %s), want the holder h, duplicate and replaced", got, got.Task.ID)
		}
		h := b.status("h", norn.StatusScheduled)
		jsonEq(t, "spec", h.Spec, `{"v":2}`)
		if h.Priority != 5 || len(h.Labels) != 1 || h.Labels["b"] != "2" {
			t.Fatalf("replaced holder: priority %d labels %v", h.Priority, h.Labels)
		}
		wantVersion(t, "replaced holder", h, 2)
		eqTime(t, "run_at", h.RunAt, first.Add(3*time.Second))
		lastHistory(t, h, norn.TaskReplace, b.now())
		sameTask(t, "the answer", h, got.Task)
		b.advance(time.Second + time.Second/2)
		b.status("h", norn.StatusScheduled)
		b.advance(time.Second / 2)
		c := b.claimID("w", "h", "q")
		jsonEq(t, "claimed spec", c.Spec, `{"v":2}`)
	})

	t.Run("DebounceMaxCapsTheRunTime", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		first := b.now()
		replace := norn.NewTask{Queue: "q", UniqueKey: "k", OnDuplicate: norn.DuplicateReplace,
			Delay: dur(2 * time.Second), DebounceMax: dur(3 * time.Second)}
		r := replace
		r.ID = "h"
		b.submit(r)
		for range 3 {
			b.advance(time.Second)
			_, err := s.Submit(b.ctx, replace)
			b.must(err, "Submit(replace)")
		}
		eqTime(t, "capped run_at", b.get("h").RunAt, first.Add(3*time.Second))
		b.status("h", norn.StatusReady)
	})
}

func debounceSuccessors(t *testing.T, setup setupFunc) {
	t.Run("ARunningHolderGetsOneSuccessor", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "h", Queue: "q", UniqueKey: "k", Spec: json.RawMessage(`{"v":1}`)})
		hd := b.claimID("w", "h", "q")
		replace := func(v string) norn.Submitted {
			t.Helper()
			res, err := s.Submit(b.ctx, norn.NewTask{Queue: "q", UniqueKey: "k", OnDuplicate: norn.DuplicateReplace, Spec: json.RawMessage(v)})
			b.must(err, "Submit(replace)")
			return res[0]
		}
		got := replace(`{"v":2}`)
		if got.Duplicate || got.Replaced {
			t.Fatalf("answer %+v, want a new task", got)
		}
		succ := got.Task.ID
		st := b.status(succ, norn.StatusBlocked)
		eqStrings(t, "successor depends_on", st.DependsOn, []string{"h"})
		if st.UniqueKey != "k" || b.get("h").UniqueKey != "" {
			t.Fatalf("unique keys: successor %q, holder %q; want the successor to hold k", st.UniqueKey, b.get("h").UniqueKey)
		}
		again := replace(`{"v":3}`)
		if !again.Replaced || again.Task.ID != succ {
			t.Fatalf("second replace %+v (task %s), want the successor %s replaced", again, again.Task.ID, succ)
		}
		b.count(norn.Filter{Queues: []string{"q"}}, 2)
		b.claimNone("q")
		b.complete(hd, "")
		c := b.claimID("w", succ, "q")
		jsonEq(t, "successor's spec", c.Spec, `{"v":3}`)
	})

	t.Run("ASuccessorRunsWhateverTheHolderOutcome", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		b.submit(norn.NewTask{ID: "h", Queue: "q", UniqueKey: "k"})
		hd := b.claimID("w", "h", "q")
		res, err := s.Submit(b.ctx, norn.NewTask{ID: "next", Queue: "q", UniqueKey: "k", OnDuplicate: norn.DuplicateReplace})
		b.must(err, "Submit(replace)")
		if res[0].Task.ID != "next" {
			t.Fatalf("successor %q, want the caller's id next", res[0].Task.ID)
		}
		b.abort(hd, "bad")
		b.status("next", norn.StatusReady)
	})
}

func debounceOthers(t *testing.T, setup setupFunc) {
	t.Run("KeepIsTheDefault", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "h", Queue: "q", UniqueKey: "k", Spec: json.RawMessage(`{"v":1}`)})
		before := b.snapshot()
		res := uniqDupOf(b, "h", norn.NewTask{Queue: "q", UniqueKey: "k", OnDuplicate: norn.DuplicateKeep, Spec: json.RawMessage(`{"v":2}`)})
		if res[0].Replaced {
			t.Fatal("keep replaced the holder")
		}
		b.unchanged("after a keep duplicate", before)
	})

	t.Run("AnEndedHolderIsAPlainDuplicate", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "h", Queue: "q", UniqueKey: "k", UniqueFor: dur(time.Hour)})
		b.complete(b.claimID("w", "h", "q"), "")
		before := b.snapshot()
		uniqDupOf(b, "h", norn.NewTask{Queue: "q", UniqueKey: "k", UniqueFor: dur(time.Hour), OnDuplicate: norn.DuplicateReplace})
		b.unchanged("after replacing an ended holder", before)
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		s, b := setup(t)
		before := b.snapshot()
		for _, c := range []struct {
			name  string
			nt    norn.NewTask
			field string
		}{
			{"replace without a key", norn.NewTask{Queue: "q", OnDuplicate: norn.DuplicateReplace}, "tasks[0].on_duplicate"},
			{"an unknown mode", norn.NewTask{Queue: "q", UniqueKey: "k", OnDuplicate: "merge"}, "tasks[0].on_duplicate"},
			{"debounce_max without replace", norn.NewTask{Queue: "q", UniqueKey: "k", DebounceMax: dur(time.Second)}, "tasks[0].debounce_max"},
			{"replace in a sequence", norn.NewTask{Queue: "q", UniqueKey: "k", SequenceKey: "s", OnDuplicate: norn.DuplicateReplace}, "tasks[0].on_duplicate"},
		} {
			_, err := s.Submit(b.ctx, c.nt)
			wantField(t, c.name, err, norn.ErrInvalidArgument, c.field)
		}
		b.unchanged("after refused debounce input", before)
	})
}
