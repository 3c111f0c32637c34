package storetest

import (
	"testing"
	"time"

	"github.com/nornq/norn"
)

// exerciseBatchClaims: a claim with min answers only once min tasks are
// ready, or once the one ready longest has waited linger.
func exerciseBatchClaims(t *testing.T, setup setupFunc) {
	t.Run("BatchClaims", func(t *testing.T) {
		t.Parallel()
		t.Run("MinWaitsForEnoughTasks", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "b", Queue: "q"})
			req := norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 5, Min: 3}
			if got := b.claimReq(req); len(got) != 0 {
				t.Fatalf("claim with 2 of min 3 ready: %v", ids(got))
			}
			b.status("a", norn.StatusReady)
			b.submit(norn.NewTask{ID: "c", Queue: "q"})
			eqStrings(t, "claim with 3 ready", sortedIDs(b.claimReq(req)), []string{"a", "b", "c"})
		})

		t.Run("LingerHandsOutFewerOnceItPassed", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.submit(norn.NewTask{ID: "a", Queue: "q"})
			b.advance(5 * time.Second)
			b.submit(norn.NewTask{ID: "b", Queue: "q"})
			req := norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 5, Min: 3, Linger: dur(10 * time.Second)}
			if got := b.claimReq(req); len(got) != 0 {
				t.Fatalf("claim while lingering: %v", ids(got))
			}
			// The linger counts from the first ready task, not the last.
			b.advance(5 * time.Second)
			eqStrings(t, "claim after the linger", sortedIDs(b.claimReq(req)), []string{"a", "b"})
		})

		t.Run("OnlyReadyTasksOfOpenQueuesCount", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submit(norn.NewTask{ID: "a", Queue: "q"}, norn.NewTask{ID: "later", Queue: "q", Delay: dur(time.Hour)},
				norn.NewTask{ID: "p", Queue: "paused"})
			_, err := s.UpdateQueue(b.ctx, "paused", norn.QueueUpdate{Paused: ptr(true)})
			b.must(err, "UpdateQueue")
			req := norn.ClaimRequest{Worker: "w", Queues: []string{"q", "paused"}, N: 5, Min: 2}
			if got := b.claimReq(req); len(got) != 0 {
				t.Fatalf("a scheduled task or a paused queue's counted: %v", ids(got))
			}
			b.submit(norn.NewTask{ID: "b", Queue: "q"})
			eqStrings(t, "claim", sortedIDs(b.claimReq(req)), []string{"a", "b"})
		})

		t.Run("ALongPollAnswersWhenMinIsReached", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.submit(norn.NewTask{ID: "a", Queue: "q"})
			type result struct {
				got []*norn.Task
				err error
			}
			done := make(chan result, 1)
			go func() {
				got, err := b.s.Claim(b.ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 5, Min: 2, Wait: dur(time.Minute)})
				done <- result{got, err}
			}()
			b.submit(norn.NewTask{ID: "b", Queue: "q"})
			r := <-done
			b.must(r.err, "Claim")
			eqStrings(t, "long-poll claim", sortedIDs(r.got), []string{"a", "b"})
		})

		t.Run("BadInput", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			b.submit(norn.NewTask{ID: "a", Queue: "q"})
			before := b.snapshot()
			for _, c := range []struct {
				name  string
				req   norn.ClaimRequest
				field string
			}{
				{"min above n", norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 2, Min: 3}, "min"},
				{"negative min", norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 2, Min: -1}, "min"},
				{"linger without min", norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 2, Linger: dur(time.Second)}, "linger"},
			} {
				_, err := s.Claim(b.ctx, c.req)
				wantField(t, c.name, err, norn.ErrInvalidArgument, c.field)
			}
			b.unchanged("after refused batch claims", before)
		})

		exerciseGroupClaims(t, setup)
	})
}
