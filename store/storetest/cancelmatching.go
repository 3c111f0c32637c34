package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// exerciseCancelMatching: cancel by filter does what single cancels do to
// each pending match, skips ended ones and refuses an empty filter.
func exerciseCancelMatching(t *testing.T, setup setupFunc) {
	t.Run("CancelMatching", func(t *testing.T) {
		t.Parallel()

		t.Run("CancelsEveryPendingMatchAndSkipsOthers", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submit(
				norn.NewTask{ID: "ready", Queue: "q"},
				norn.NewTask{ID: "later", Queue: "q", Delay: dur(time.Hour)},
				norn.NewTask{ID: "elsewhere", Queue: "p"},
			)
			run := b.claimed("w1", norn.NewTask{ID: "running", Queue: "q", Priority: 9})
			b.complete(b.claimed("w1", norn.NewTask{ID: "done", Queue: "q", Priority: 9}), "")
			n, err := s.CancelMatching(b.ctx, norn.Filter{Queues: []string{"q"}})
			b.must(err, "CancelMatching")
			if n != 3 {
				t.Fatalf("CancelMatching cancelled %d, want 3", n)
			}
			for _, id := range []string{"ready", "later"} {
				lastHistory(t, b.status(id, norn.StatusCancelled), norn.TaskCancel, b.now())
			}
			h := lastHistory(t, b.status("running", norn.StatusCancelled), norn.TaskCancel, b.now())
			if h.Worker != "w1" || h.Lease != run.Lease {
				t.Fatalf("cancel of a running task recorded worker %q lease %d", h.Worker, h.Lease)
			}
			wantErr(t, "heartbeat after cancel by filter", func() error { _, err := s.Heartbeat(b.ctx, ref(run), norn.Heartbeat{}); return err }(), norn.ErrCancelled)
			b.status("done", norn.StatusCompleted)
			b.status("elsewhere", norn.StatusReady)
			// A second pass finds nothing left to cancel.
			n, err = s.CancelMatching(b.ctx, norn.Filter{Queues: []string{"q"}})
			if err != nil || n != 0 {
				t.Fatalf("second CancelMatching = %d, %v; want 0", n, err)
			}
			// Ended statuses match nothing.
			n, err = s.CancelMatching(b.ctx, norn.Filter{Statuses: []norn.Status{norn.StatusCompleted}})
			if err != nil || n != 0 {
				t.Fatalf("CancelMatching(completed) = %d, %v; want 0", n, err)
			}
		})

		t.Run("AbortsDependentsOfCancelledTasks", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submit(
				norn.NewTask{ID: "dep", Queue: "q", Labels: map[string]string{"batch": "7"}},
				norn.NewTask{ID: "child", Queue: "q", DependsOn: []string{"dep"}},
			)
			n, err := s.CancelMatching(b.ctx, norn.Filter{Labels: map[string]string{"batch": "7"}})
			b.must(err, "CancelMatching")
			if n != 1 {
				t.Fatalf("cancelled %d, want 1", n)
			}
			lastError(t, b.status("child", norn.StatusAborted), norn.CodeDependencyFailed)
		})

		t.Run("WorksThroughManyBatches", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			const total = norn.RetryBatch*2 + 7
			nts := make([]norn.NewTask, total)
			for i := range nts {
				nts[i] = norn.NewTask{ID: fmt.Sprintf("t%04d", i), Queue: "bulk"}
			}
			b.submitMany(nts)
			n, err := s.CancelMatching(b.ctx, norn.Filter{Queues: []string{"bulk"}})
			b.must(err, "CancelMatching")
			if n != total {
				t.Fatalf("cancelled %d, want %d", n, total)
			}
			b.count(norn.Filter{Queues: []string{"bulk"}, Statuses: []norn.Status{norn.StatusCancelled}}, total)
		})

		t.Run("EmptyFilterIsRefusedAndChangesNothing", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submit(norn.NewTask{ID: "a", Queue: "q"})
			before := b.snapshot()
			_, err := s.CancelMatching(b.ctx, norn.Filter{})
			wantField(t, "CancelMatching with an empty filter", err, norn.ErrInvalidArgument, "filter")
			b.unchanged("refused cancel by filter", before)
		})
	})
}
