package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/await"
	"github.com/nornq/norn/internal/pgtest"
)

// TestSequencesUnderConcurrency: submitters, claimers and cancels of
// waiting members run at once on two nodes (two stores on one schema);
// per key, no two members ever run together and the members that ran did
// so in submit order (the hand-over in the trigger, and its re-read when a
// waiting member ends while it waits for that member's lock).
func TestSequencesUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	nodes := twoNodes(t)
	s := nodes[0]
	const keys, per, workers = 6, 40, 4
	w, err := s.RegisterWorker(ctx, norn.WorkerInfo{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	last := map[string]string{}
	// ran holds each key's claimed members with their claim time (the
	// database's): the order in which claimers record them is not the
	// claim order, since a member cancelled while running hands its key
	// on at once, and its successor's claimer can record it first.
	type claimed struct {
		at time.Time
		n  int
	}
	ran := map[string][]claimed{}
	cancelled := map[string]bool{}
	var g group
	for k := range keys {
		s := nodes[k%2]
		g.Go(func() error {
			for i := range per {
				id := fmt.Sprintf("k%d-%03d", k, i)
				if _, err := s.Submit(ctx, norn.NewTask{ID: id, Queue: "sq", SequenceKey: fmt.Sprintf("k%d", k), Priority: uint32(i % 3)}); err != nil {
					return err
				}
				if i%7 == 3 { // cancel an earlier member, waiting or not
					victim := fmt.Sprintf("k%d-%03d", k, i-1)
					if _, err := s.Cancel(ctx, victim); err == nil {
						mu.Lock()
						cancelled[victim] = true
						mu.Unlock()
					}
				}
			}
			return nil
		})
	}
	done := make(chan struct{})
	var wg group
	for n := range workers {
		s := nodes[n%2]
		wg.Go(func() error {
			for {
				got, err := s.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"sq"}, N: 3})
				if err != nil {
					return err
				}
				if len(got) == 0 {
					select {
					case <-done:
						return nil
					default:
						continue
					}
				}
				for _, tk := range got {
					// Every member claimed before this one of its key
					// must have ended: otherwise two ran at once.
					mu.Lock()
					prev := last[tk.SequenceKey]
					last[tk.SequenceKey] = tk.ID
					var n int
					fmt.Sscanf(tk.ID[len(tk.ID)-3:], "%d", &n)
					ran[tk.SequenceKey] = append(ran[tk.SequenceKey], claimed{tk.Started, n})
					mu.Unlock()
					if prev != "" {
						p, err := s.Get(ctx, prev)
						if err != nil {
							return err
						}
						if !p.Status.Terminal() {
							return fmt.Errorf("%s claimed while %s of its sequence is %s", tk.ID, prev, p.Status)
						}
					}
					// A running member the submitters cancelled cannot
					// complete: its cancel already handed the key on.
					err := s.Complete(ctx, norn.LeaseRef{TaskID: tk.ID, Worker: w, Lease: tk.Lease}, nil)
					if err != nil && !errors.Is(err, norn.ErrCancelled) {
						return err
					}
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	// Wait until every sequence drained, then stop the claimers.
	// The sequences' state has no event to await: it is polled.
	k := 0
	stop := sync.OnceFunc(func() { close(done) })
	defer stop() // a failed wait stops the claimers too
	await.Check(t, time.Minute, "every sequence to drain", func() (string, error) {
		for ; k < keys; k++ {
			info, err := s.Sequence(ctx, "sq", fmt.Sprintf("k%d", k))
			if err != nil {
				return "", err
			}
			if info.Head != "" || info.Waiting > 0 {
				return fmt.Sprintf("sequence k%d: %+v", k, info), nil
			}
		}
		return "", nil
	})
	stop()
	if err := wg.Wait(); err != nil {
		t.Fatal(err)
	}
	for k := range keys {
		key := fmt.Sprintf("k%d", k)
		slices.SortStableFunc(ran[key], func(a, b claimed) int { return a.at.Compare(b.at) })
		var seq []int
		for _, c := range ran[key] {
			seq = append(seq, c.n)
		}
		for i := 1; i < len(seq); i++ {
			if seq[i] <= seq[i-1] {
				t.Fatalf("%s ran out of order: %v", key, seq)
			}
		}
		// A member cancelled while running ran too; every member not
		// cancelled must have run.
		didRun := map[int]bool{}
		for _, n := range seq {
			didRun[n] = true
		}
		for i := range per {
			if !cancelled[fmt.Sprintf("%s-%03d", key, i)] && !didRun[i] {
				t.Fatalf("%s: member %d was not cancelled and never ran: %v", key, i, seq)
			}
		}
	}
}

// twoNodes opens two stores on one fresh schema (two nodes of a
// cluster), their monitors off.
func twoNodes(t *testing.T) []*Store {
	url, schema := pgtest.Schema(t)
	open := func() *Store {
		s, err := Open(context.Background(), Config{URL: url, Schema: schema, Migrate: true, DisableMonitor: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	return []*Store{open(), open()}
}

// group runs goroutines and keeps the first error, as errgroup would.
type group struct {
	wg   sync.WaitGroup
	once sync.Once
	err  error
}

func (g *group) Go(f func() error) {
	g.wg.Go(func() {
		if err := f(); err != nil {
			g.once.Do(func() { g.err = err })
		}
	})
}

func (g *group) Wait() error {
	g.wg.Wait()
	return g.err
}
