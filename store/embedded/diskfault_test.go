package embedded

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/nornq/norn"
)

// syncedLog collects a store's log output for assertions.
type syncedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *syncedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *syncedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// faultFS returns a filesystem failing the operations inject picks while
// the toggle is on.
func faultFS(inject func(errorfs.Op) error) (vfs.FS, *errorfs.Toggle) {
	tog := &errorfs.Toggle{Injector: errorfs.InjectorFunc(inject)}
	return errorfs.Wrap(vfs.Default, tog), tog
}

// An fsync that fails must never be acknowledged: the write that waited
// for it fails, every later write is refused (memory may be ahead of
// disk), reads keep working, Ready and the log say why, Close does not
// crash, and a reopen on a healthy disk has every acknowledged task.
func TestSyncErrorStopsWrites(t *testing.T) {
	for _, d := range []Durability{Strict, Opportunistic} {
		name := map[Durability]string{Strict: "strict", Opportunistic: "opportunistic"}[d]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			fs, tog := faultFS(func(op errorfs.Op) error {
				switch op.Kind {
				case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
					return syscall.EIO
				}
				return nil
			})
			logs := &syncedLog{}
			s, err := Open(ctx, Options{Dir: dir, Durability: d, fs: fs, ManualSweep: true,
				Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			acked := map[string]bool{}
			if _, err := s.Submit(ctx, norn.NewTask{ID: "before", Queue: "q"}); err != nil {
				t.Fatal(err)
			}
			acked["before"] = true
			if err := s.Ready(ctx); err != nil {
				t.Fatalf("healthy store not ready: %v", err)
			}
			tog.On()
			// Strict: this submit waits for the failing sync. Opportunistic:
			// it is acknowledged before the sync, like any opportunistic
			// write; the failing background sync then stops the store.
			if _, err := s.Submit(ctx, norn.NewTask{ID: "during", Queue: "q"}); err == nil {
				if d == Strict {
					t.Fatal("a submit whose sync failed was acknowledged")
				}
				acked["during"] = true
			} else if !errors.Is(err, norn.ErrUnavailable) {
				t.Fatalf("submit during sync errors: %v, want unavailable", err)
			}
			if d == Opportunistic {
				await.Until(t, 10*time.Second, "the background sync fails", func() bool { return s.Ready(ctx) != nil })
			}
			if _, err := s.Submit(ctx, norn.NewTask{ID: "after", Queue: "q"}); !errors.Is(err, norn.ErrUnavailable) {
				t.Fatalf("submit after a failed sync: %v, want unavailable", err)
			}
			if _, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}}); !errors.Is(err, norn.ErrUnavailable) {
				t.Fatalf("claim after a failed sync: %v, want unavailable", err)
			}
			if _, err := s.Get(ctx, "before"); err != nil {
				t.Fatalf("read after a failed sync: %v", err)
			}
			if err := s.Ready(ctx); err == nil || !bytes.Contains([]byte(err.Error()), []byte("input/output error")) {
				t.Fatalf("Ready after a failed sync: %v, want the sync error", err)
			}
			if !bytes.Contains([]byte(logs.String()), []byte("refusing writes")) {
				t.Fatalf("the failure is not logged:\n%s", logs)
			}
			tog.Off()
			s.Close()

			s, err = Open(ctx, Options{Dir: dir, ManualSweep: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for id := range acked {
				if _, err := s.Get(ctx, id); err != nil {
					t.Errorf("acknowledged %s after reopen: %v", id, err)
				}
			}
			if _, err := s.Submit(ctx, norn.NewTask{ID: "reopened", Queue: "q"}); err != nil {
				t.Fatalf("submit after reopen: %v", err)
			}
		})
	}
}

// A claim reads its tasks back while its WAL sync is in flight; when that
// sync fails, the claim must fail and hand out none of them.
func TestClaimWhoseSyncFailsReturnsNoTasks(t *testing.T) {
	ctx := context.Background()
	fs, tog := faultFS(func(op errorfs.Op) error {
		switch op.Kind {
		case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
			return syscall.EIO
		}
		return nil
	})
	s, err := Open(ctx, Options{Dir: t.TempDir(), Durability: Strict, fs: fs, ManualSweep: true,
		Logger: slog.New(slog.NewTextHandler(&syncedLog{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Submit(ctx, norn.NewTask{Queue: "q"}, norn.NewTask{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	tog.On()
	got, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 2})
	if !errors.Is(err, norn.ErrUnavailable) || len(got) != 0 {
		t.Fatalf("claim whose sync failed: %d tasks, %v; want none, unavailable", len(got), err)
	}
	tog.Off()
}
