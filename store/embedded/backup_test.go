package embedded

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nornq/norn"
)

// TestBackupUnderLoad: a backup taken while submits, claims and
// completions go on holds every task acknowledged before it started, in
// the state it was acknowledged in or a later one, and restores to a
// store that passes the consistency check; the source goes on.
func TestBackupUnderLoad(t *testing.T) {
	for _, d := range []Durability{Strict, Opportunistic} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			root := t.TempDir()
			s, err := Open(ctx, Options{Dir: filepath.Join(root, "data"), Durability: d, ManualSweep: true, Logger: quietLog()})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var (
				mu        sync.Mutex
				submitted = map[string]bool{}
				completed = map[string]bool{}
				stop      atomic.Bool
				wg        sync.WaitGroup
				n         atomic.Int64
			)
			wg.Add(2)
			go func() { // producer
				defer wg.Done()
				for i := 0; !stop.Load(); i++ {
					ids := make([]norn.NewTask, 20)
					for j := range ids {
						ids[j] = norn.NewTask{ID: fmt.Sprintf("p%05d-%02d", i, j), Queue: "q"}
					}
					if _, err := s.Submit(ctx, ids...); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					for _, nt := range ids {
						submitted[nt.ID] = true
					}
					mu.Unlock()
					n.Add(20)
				}
			}()
			go func() { // worker
				defer wg.Done()
				for !stop.Load() {
					ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 10})
					if err != nil {
						t.Error(err)
						return
					}
					for _, tk := range ts {
						if err := s.Complete(ctx, norn.LeaseRef{TaskID: tk.ID, Worker: "w", Lease: tk.Lease}, nil); err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						completed[tk.ID] = true
						mu.Unlock()
					}
				}
			}()
			for n.Load() < 2000 {
				runtime.Gosched()
			}
			mu.Lock()
			beforeSub := maps.Clone(submitted)
			beforeDone := maps.Clone(completed)
			mu.Unlock()
			info, err := s.Backup(ctx, filepath.Join(root, "backup"))
			if err != nil {
				t.Fatal(err)
			}
			stop.Store(true)
			wg.Wait()
			if info.Bytes == 0 || info.Dir != filepath.Join(root, "backup") {
				t.Fatalf("backup info %+v", info)
			}

			if err := Restore(ctx, info.Dir, filepath.Join(root, "restored")); err != nil {
				t.Fatal(err)
			}
			r, err := Open(ctx, Options{Dir: filepath.Join(root, "restored"), ManualSweep: true, Logger: quietLog()})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			for id := range beforeSub {
				tk, err := r.Get(ctx, id)
				if err != nil {
					t.Fatalf("task %s acknowledged before the backup: %v", id, err)
				}
				if beforeDone[id] && tk.Status != norn.StatusCompleted {
					t.Fatalf("task %s completed before the backup is %s in it", id, tk.Status)
				}
			}
			checkConsistent(t, r)
			// The source went on and still works.
			if _, err := s.Submit(ctx, norn.NewTask{Queue: "q"}); err != nil {
				t.Fatalf("submit after the backup: %v", err)
			}
		})
	}
}

// checkConsistent: every task is in exactly one state (the counts by
// status add up to the total, each task read alone agrees with the
// listing), and its history ends with the entry of that state.
func checkConsistent(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	total, err := s.Count(ctx, norn.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	groups, err := s.CountGrouped(ctx, norn.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, g := range groups {
		sum += g.Count
	}
	if sum != total {
		t.Fatalf("counts by status add up to %d, the total is %d", sum, total)
	}
	it, err := s.Stream(ctx, norn.Query{})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for it.Next() {
		tk := it.Item()
		one, err := s.Get(ctx, tk.ID)
		if err != nil || one.Status != tk.Status {
			t.Fatalf("task %s listed as %s, read alone: %v, %v", tk.ID, tk.Status, one, err)
		}
		if tk.Status == norn.StatusCompleted {
			if h := one.History; len(h) == 0 || h[len(h)-1].Type != norn.TaskComplete {
				t.Fatalf("completed task %s's history ends %v", tk.ID, h)
			}
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestBackupRefusesBadDirs: a backup never writes over anything, nor into
// the data directory, and says what is wrong; a restore never writes over
// a directory either.
func TestBackupRefusesBadDirs(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := Open(ctx, Options{Dir: filepath.Join(root, "data"), ManualSweep: true, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.Mkdir(filepath.Join(root, "taken"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "cut"+partialSuffix), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, want string }{
		{"", "required"},
		{filepath.Join(root, "taken"), "exists"},
		{filepath.Join(root, "data", "inside"), "inside the data directory"},
		{filepath.Join(root, "cut"), "unfinished backup"},
		{filepath.Join(root, "no", "parent"), "parent"},
	} {
		_, err := s.Backup(ctx, c.dir)
		var ne *norn.Error
		if !errors.As(err, &ne) || ne.Code != norn.CodeInvalidArgument || ne.Field != "dir" || !strings.Contains(ne.Message, c.want) {
			t.Errorf("backup into %q: %v, want invalid dir saying %q", c.dir, err, c.want)
		}
	}
	info, err := s.Backup(ctx, filepath.Join(root, "ok"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Restore(ctx, info.Dir, filepath.Join(root, "taken")); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("restore over a directory: %v", err)
	}
	if err := Restore(ctx, filepath.Join(root, "cut"+partialSuffix), filepath.Join(root, "new")); err == nil || !strings.Contains(err.Error(), "unfinished") {
		t.Errorf("restore of an unfinished backup: %v", err)
	}
	if err := Restore(ctx, filepath.Join(root, "taken"), filepath.Join(root, "new")); err == nil || !strings.Contains(err.Error(), "not a backup") {
		t.Errorf("restore of a directory that is no backup: %v", err)
	}
}
