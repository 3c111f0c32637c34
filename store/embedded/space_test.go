package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/internal/oacheck"
	"github.com/nornq/norn/server"
)

// budgetFS is a disk with a byte budget: writes spend it, a write that
// finds too little left writes what fits and fails with ENOSPC (as a full
// disk does), GetDiskUsage reports what is left, and setFree plays another
// process filling or freeing the disk.
type budgetFS struct {
	vfs.FS
	mu    sync.Mutex
	left  int64
	total int64 // the disk's size (0: 1 TiB)
}

func (fs *budgetFS) free() int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.left
}

func newBudgetFS(free int64) *budgetFS { return &budgetFS{FS: vfs.Default, left: free} }

func (fs *budgetFS) setFree(n int64) {
	fs.mu.Lock()
	fs.left = n
	fs.mu.Unlock()
}

// spend takes up to n bytes; it returns how many it got.
func (fs *budgetFS) spend(n int) int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	got := int(min(int64(n), max(fs.left, 0)))
	fs.left -= int64(got)
	return got
}

func (fs *budgetFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	total := uint64(1 << 40)
	if fs.total > 0 {
		total = uint64(fs.total)
	}
	return vfs.DiskUsage{AvailBytes: uint64(max(fs.left, 0)), TotalBytes: total}, nil
}

func (fs *budgetFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &budgetFile{File: f, fs: fs}, nil
}

func (fs *budgetFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name, c))
}

func (fs *budgetFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, c, o...))
}

func (fs *budgetFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, c))
}

type budgetFile struct {
	vfs.File
	fs *budgetFS
}

func (f *budgetFile) Write(p []byte) (int, error) {
	n := f.fs.spend(len(p))
	w, err := f.File.Write(p[:n])
	if err == nil && n < len(p) {
		err = &pathError{syscall.ENOSPC}
	}
	return w, err
}

// Remove gives a file's space back, as a file system does.
func (fs *budgetFS) Remove(name string) error {
	fi, statErr := fs.FS.Stat(name)
	if err := fs.FS.Remove(name); err != nil {
		return err
	}
	if statErr == nil {
		fs.mu.Lock()
		fs.left += fi.Size()
		fs.mu.Unlock()
	}
	return nil
}

// Preallocate spends the budget the way fallocate takes disk space.
func (f *budgetFile) Preallocate(off, n int64) error {
	if got := f.fs.spend(int(n)); int64(got) < n {
		return &pathError{syscall.ENOSPC}
	}
	return f.File.Preallocate(off, n)
}

func (f *budgetFile) WriteAt(p []byte, off int64) (int, error) {
	n := f.fs.spend(len(p))
	w, err := f.File.WriteAt(p[:n], off)
	if err == nil && n < len(p) {
		err = &pathError{syscall.ENOSPC}
	}
	return w, err
}

// pathError wraps the errno the way *os.PathError does.
type pathError struct{ errno syscall.Errno }

func (e *pathError) Error() string { return "write: " + e.errno.Error() }
func (e *pathError) Unwrap() error { return e.errno }

// openOn opens a store in dir on the budgeted disk fs, without a reserve.
func openOn(t *testing.T, dir string, fs *budgetFS) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{Dir: dir, fs: fs, MinFreeBytes: -1, ManualSweep: true, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// reopen opens dir again on the real disk, to see what was kept; the
// store is closed when the test ends.
func reopen(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{Dir: dir, ManualSweep: true, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Below the free space kept in reserve, new data is refused with
// insufficient_storage and changes nothing, what is stored keeps moving
// (reads, claims, heartbeats, completions, cancels), and once space is
// freed writes resume by themselves, without a reopen. A reopen then has
// everything that was acknowledged, in the state it was acknowledged in.
func TestDiskFullRefusesNewDataUntilSpaceIsFreed(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := newBudgetFS(256 << 20)
	logs := &syncedLog{}
	s, err := Open(ctx, Options{Dir: dir, fs: fs, MinFreeBytes: 4 << 20, spaceInterval: time.Nanosecond,
		ManualSweep: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := s.Submit(ctx, norn.NewTask{ID: fmt.Sprintf("t%02d", i), Queue: "q", Spec: json.RawMessage(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	wid, err := s.RegisterWorker(ctx, norn.WorkerInfo{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	held, err := s.Claim(ctx, norn.ClaimRequest{Worker: wid, Queues: []string{"q"}, N: 1})
	if err != nil || len(held) != 1 {
		t.Fatalf("claim: %v %v", held, err)
	}

	ref := func(t *norn.Task) norn.LeaseRef { return norn.LeaseRef{TaskID: t.ID, Worker: wid, Lease: t.Lease} }
	fs.setFree(1 << 20) // another process fills the disk

	refused := func(what string, err error) {
		t.Helper()
		var ne *norn.Error
		if !errors.Is(err, norn.ErrInsufficientStorage) || !errors.As(err, &ne) || !strings.Contains(ne.Message, "reserve") {
			t.Fatalf("%s below the reserve: %v, want insufficient_storage naming the reserve", what, err)
		}
	}
	_, err = s.Submit(ctx, norn.NewTask{ID: "new", Queue: "q"})
	refused("submit", err)
	_, err = s.Transact(ctx, norn.Txn{Submit: []norn.NewTask{{ID: "new", Queue: "q"}}})
	refused("transact", err)
	_, err = s.AppendLog(ctx, ref(held[0]), norn.LogAppend{Data: json.RawMessage(`"x"`)})
	refused("log append", err)
	_, err = s.PutSchedule(ctx, norn.Schedule{Name: "s", Cron: "* * * * *", Queue: "q"})
	refused("put schedule", err)
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("Ready below the reserve: %v, want ready (claims and finishing calls are served)", err)
	}
	if !strings.Contains(logs.String(), "below the reserve") {
		t.Fatalf("the low free space is not logged:\n%s", logs)
	}
	if _, err := s.Get(ctx, "new"); !errors.Is(err, norn.ErrNotFound) {
		t.Fatalf("a refused submit left a task: %v", err)
	}

	// What is stored keeps moving inside the reserve.
	got, err := s.Claim(ctx, norn.ClaimRequest{Worker: wid, Queues: []string{"q"}, N: 3})
	if err != nil || len(got) != 3 {
		t.Fatalf("claim below the reserve: %d tasks, %v", len(got), err)
	}
	if _, err := s.Heartbeat(ctx, ref(got[0]), norn.Heartbeat{}); err != nil {
		t.Fatalf("heartbeat below the reserve: %v", err)
	}
	if err := s.Complete(ctx, ref(got[0]), json.RawMessage(`{"ok":true}`)); err != nil {
		t.Fatalf("complete below the reserve: %v", err)
	}
	if err := s.Fail(ctx, ref(got[1]), norn.ErrorInfo{Code: "boom"}); err != nil {
		t.Fatalf("fail below the reserve: %v", err)
	}
	if _, err := s.Cancel(ctx, "t19"); err != nil {
		t.Fatalf("cancel below the reserve: %v", err)
	}
	if n, err := s.Count(ctx, norn.Filter{Queues: []string{"q"}}); err != nil || n != 20 {
		t.Fatalf("count below the reserve: %d, %v", n, err)
	}

	fs.setFree(256 << 20) // space freed
	if _, err := s.Submit(ctx, norn.NewTask{ID: "new", Queue: "q"}); err != nil {
		t.Fatalf("submit once space was freed: %v", err)
	}
	if _, err := s.AppendLog(ctx, ref(held[0]), norn.LogAppend{Data: json.RawMessage(`"x"`)}); err != nil {
		t.Fatalf("log append once space was freed: %v", err)
	}
	if err := s.Ready(ctx); err != nil {
		t.Fatalf("Ready once space was freed: %v", err)
	}
	want := map[string]norn.Status{}
	page, err := s.List(ctx, norn.Query{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range page.Tasks {
		want[tk.ID] = tk.Status
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, dir)
	page, err = s.List(ctx, norn.Query{})
	if err != nil || len(page.Tasks) != len(want) || len(want) != 21 {
		t.Fatalf("after reopen: %d tasks (want %d), %v", len(page.Tasks), len(want), err)
	}
	for _, tk := range page.Tasks {
		if want[tk.ID] != tk.Status {
			t.Errorf("%s is %s after reopen, was acknowledged %s", tk.ID, tk.Status, want[tk.ID])
		}
	}
}

// Over HTTP a write refused for lack of space is 507 insufficient_storage,
// and the Go client gives back the same error.
func TestDiskFullOverHTTP(t *testing.T) {
	ctx := context.Background()
	fs := newBudgetFS(256 << 20)
	st, err := Open(ctx, Options{Dir: t.TempDir(), fs: fs, MinFreeBytes: 4 << 20, spaceInterval: time.Nanosecond,
		ManualSweep: true, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := server.New(server.Config{Addr: "127.0.0.1:0", Store: st, ShutdownTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), WrapHandler: oacheck.ForTest(t, server.OpenAPI())})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	defer func() { stop(); <-done }()

	fs.setFree(1 << 20)
	resp, err := http.Post(srv.URL()+"/v1/tasks", "application/json", strings.NewReader(`{"queue":"q"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusInsufficientStorage || !strings.Contains(string(body), `"code":"insufficient_storage"`) {
		t.Fatalf("submit on a full disk: %d %s, want 507 insufficient_storage", resp.StatusCode, body)
	}
	c, err := client.New(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Submit(ctx, norn.NewTask{Queue: "q"}); !errors.Is(err, norn.ErrInsufficientStorage) {
		t.Fatalf("client submit on a full disk: %v, want ErrInsufficientStorage", err)
	}
	fs.setFree(256 << 20)
	if _, err := c.Submit(ctx, norn.NewTask{Queue: "q"}); err != nil {
		t.Fatalf("client submit once space was freed: %v", err)
	}
}

// A disk that fills completely (no reserve left, or filled faster than
// the store looks) in both durability modes: the write under way waits
// for space and is acknowledged once it is on disk, every other write is
// refused at once with insufficient_storage and changes nothing, reads
// keep working, the process does not crash, and once space is freed
// writes resume by themselves. A reopen has everything acknowledged and
// nothing refused.
func TestDiskFilledCompletely(t *testing.T) {
	for _, d := range []Durability{Strict, Opportunistic} {
		t.Run(d.String(), func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			fs := newBudgetFS(256 << 20)
			logs := &syncedLog{}
			s, err := Open(ctx, Options{Dir: dir, fs: fs, Durability: d, MinFreeBytes: -1, ManualSweep: true,
				Logger: slog.New(slog.NewTextHandler(logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			acked := map[string]bool{}
			for i := range 50 {
				id := fmt.Sprintf("t%02d", i)
				if _, err := s.Submit(ctx, norn.NewTask{ID: id, Queue: "q"}); err != nil {
					t.Fatal(err)
				}
				acked[id] = true
			}

			fs.setFree(0)
			// Strict: this submit's log write meets the full disk and
			// waits. Opportunistic: it is acknowledged at once, as every
			// opportunistic write is; its log write then waits.
			inflight := make(chan error, 1)
			go func() {
				_, err := s.Submit(ctx, norn.NewTask{ID: "inflight", Queue: "q", Spec: json.RawMessage(`{"pad":"` + strings.Repeat("x", 4096) + `"}`)})
				inflight <- err
			}()
			if d == Opportunistic {
				if err := <-inflight; err != nil {
					t.Fatalf("opportunistic submit: %v", err)
				}
			}
			await.Until(t, 10*time.Second, "the store sees the full disk", func() bool { return errors.Is(s.Ready(ctx), norn.ErrInsufficientStorage) })
			// The disk is marked full just before the message is logged.
			await.Until(t, 10*time.Second, "the full disk is logged", func() bool {
				return strings.Contains(logs.String(), "disk of the data directory is full")
			})
			refused := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, norn.ErrInsufficientStorage) {
					t.Fatalf("%s on a full disk: %v, want insufficient_storage", what, err)
				}
			}
			_, err = s.Submit(ctx, norn.NewTask{ID: "refused", Queue: "q"})
			refused("submit", err)
			_, err = s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}})
			refused("claim", err)
			_, err = s.Cancel(ctx, "t03")
			refused("cancel", err)
			if _, err := s.Get(ctx, "t07"); err != nil {
				t.Fatalf("read on a full disk: %v", err)
			}
			if n, err := s.Count(ctx, norn.Filter{}); err != nil || n < 50 {
				t.Fatalf("count on a full disk: %d, %v", n, err)
			}
			if d == Strict {
				select {
				case err := <-inflight:
					t.Fatalf("a strict submit returned before its write was on disk: %v", err)
				default:
				}
			}

			fs.setFree(256 << 20) // space freed
			if d == Strict {
				if err := <-inflight; err != nil {
					t.Fatalf("the waiting submit once space was freed: %v", err)
				}
			}
			acked["inflight"] = true
			await.Until(t, 10*time.Second, "writes resume", func() bool { return s.Ready(ctx) == nil })
			if _, err := s.Submit(ctx, norn.NewTask{ID: "after", Queue: "q"}); err != nil {
				t.Fatalf("submit once space was freed: %v", err)
			}
			acked["after"] = true
			if ts, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 2}); err != nil || len(ts) != 2 {
				t.Fatalf("claim once space was freed: %d, %v", len(ts), err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}

			s = reopen(t, dir)
			for id := range acked {
				if _, err := s.Get(ctx, id); err != nil {
					t.Errorf("acknowledged %s after the disk was full: %v", id, err)
				}
			}
			if _, err := s.Get(ctx, "refused"); !errors.Is(err, norn.ErrNotFound) {
				t.Errorf("the refused submit: %v, want not found", err)
			}
		})
	}
}

// Closing a store while a write waits for space does not hang: the write
// gives up, and what was acknowledged before is on disk.
func TestCloseOnAFullDisk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := newBudgetFS(256 << 20)
	s := openOn(t, dir, fs)
	if _, err := s.Submit(ctx, norn.NewTask{ID: "before", Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	fs.setFree(0)
	inflight := make(chan error, 1)
	go func() {
		_, err := s.Submit(ctx, norn.NewTask{ID: "inflight", Queue: "q"})
		inflight <- err
	}()
	await.Until(t, 10*time.Second, "the store sees the full disk", func() bool { return errors.Is(s.Ready(ctx), norn.ErrInsufficientStorage) })
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close hangs while a write waits for space")
	}
	if err := <-inflight; err == nil {
		t.Fatal("a write that never reached the disk was acknowledged")
	}
	fs.setFree(256 << 20)
	s = reopen(t, dir)
	if _, err := s.Get(ctx, "before"); err != nil {
		t.Fatalf("acknowledged task after a close on a full disk: %v", err)
	}
}

// Concurrent writers while the disk fills and is freed again: every
// acknowledged batch is there after a reopen, every refused one is absent,
// and no batch is there in part.
func TestDiskFullUnderConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := newBudgetFS(256 << 20)
	s := openOn(t, dir, fs)
	const writers, batches = 6, 40
	type outcome struct {
		ids   []string
		acked bool
		err   error
	}
	results := make(chan outcome, writers*batches+1)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for b := range batches {
				var nts []norn.NewTask
				var ids []string
				for k := range 3 {
					id := fmt.Sprintf("g%d-b%02d-%d", g, b, k)
					ids = append(ids, id)
					nts = append(nts, norn.NewTask{ID: id, Queue: "q", Spec: json.RawMessage(`"` + strings.Repeat("s", 512) + `"`)})
				}
				_, err := s.Submit(ctx, nts...)
				results <- outcome{ids: ids, acked: err == nil, err: err}
			}
		}()
	}
	fs.setFree(64 << 10) // the disk fills after a few batches
	close(start)
	await.Until(t, 10*time.Second, "the store sees the full disk", func() bool { return errors.Is(s.Ready(ctx), norn.ErrInsufficientStorage) })
	// Every writer may be waiting for its own queued write; a batch sent
	// now is refused whatever they do.
	probe := []string{"probe-0", "probe-1", "probe-2"}
	_, err := s.Submit(ctx, norn.NewTask{ID: probe[0], Queue: "q"}, norn.NewTask{ID: probe[1], Queue: "q"}, norn.NewTask{ID: probe[2], Queue: "q"})
	if !errors.Is(err, norn.ErrInsufficientStorage) {
		t.Fatalf("a batch on a full disk: %v, want insufficient_storage", err)
	}
	results <- outcome{ids: probe, err: err}
	fs.setFree(256 << 20)
	wg.Wait()
	close(results)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, dir)
	var nAcked, nRefused int
	for r := range results {
		_, missing, err := s.GetMany(ctx, r.ids)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case r.acked:
			nAcked++
			if len(missing) != 0 {
				t.Errorf("acknowledged batch %v lost %v", r.ids, missing)
			}
		case errors.Is(r.err, norn.ErrInsufficientStorage):
			nRefused++
			if len(missing) != len(r.ids) {
				t.Errorf("refused batch %v (%v) is there in part or whole: missing %v", r.ids, r.err, missing)
			}
		default:
			t.Errorf("batch %v: %v", r.ids, r.err)
		}
	}
	if nRefused == 0 || nAcked == 0 {
		t.Fatalf("%d batches acknowledged, %d refused: the disk did not fill under the writers", nAcked, nRefused)
	}
	t.Logf("%d batches acknowledged, %d refused", nAcked, nRefused)
}

// A restart on a disk too full to write (after a crash with the disk
// full) neither hangs nor spins: Open returns at once with the store
// read-only, reads serve what was acknowledged, writes and Ready say
// plainly that space must be freed, and Pebble's retries are not logged
// hundreds of times a second. A restart with space freed writes again.
func TestRestartOnAFullDisk(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	fs := newBudgetFS(256 << 20)
	s := openOn(t, dir, fs)
	for i := range 20 {
		if _, err := s.Submit(ctx, norn.NewTask{ID: fmt.Sprintf("t%02d", i), Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	fs.setFree(0)
	logs := &syncedLog{}
	opened := make(chan error, 1)
	var ro *Store
	go func() {
		var err error
		ro, err = Open(ctx, Options{Dir: dir, fs: fs, ManualSweep: true, Logger: slog.New(slog.NewTextHandler(logs, nil))})
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatalf("open on a full disk: %v, want a read-only store", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("open on a full disk hangs")
	}
	defer ro.Close()
	if tk, err := ro.Get(ctx, "t07"); err != nil || tk.Status != norn.StatusReady {
		t.Fatalf("read on a full disk: %v, %v", tk, err)
	}
	if n, err := ro.Count(ctx, norn.Filter{}); err != nil || n != 20 {
		t.Fatalf("count on a full disk: %d, %v", n, err)
	}
	_, err := ro.Submit(ctx, norn.NewTask{Queue: "q"})
	if !errors.Is(err, norn.ErrInsufficientStorage) || !strings.Contains(err.Error(), "free space and restart") {
		t.Fatalf("submit on a store opened read-only: %v, want insufficient_storage saying what to do", err)
	}
	if _, err := ro.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}}); !errors.Is(err, norn.ErrInsufficientStorage) {
		t.Fatalf("claim on a store opened read-only: %v", err)
	}
	if err := ro.Ready(ctx); err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("Ready: %v, want the reason naming the directory", err)
	}
	if n := strings.Count(logs.String(), "\n"); n > 20 {
		t.Fatalf("%d log lines for one full-disk start:\n%s", n, logs.String())
	}
	if err := ro.Close(); err != nil {
		t.Fatalf("close of the read-only store: %v", err)
	}

	fs.setFree(256 << 20)
	s = openOn(t, dir, fs)
	defer s.Close()
	if _, err := s.Submit(ctx, norn.NewTask{ID: "after", Queue: "q"}); err != nil {
		t.Fatalf("submit after a restart with space: %v", err)
	}
	if n, err := s.Count(ctx, norn.Filter{}); err != nil || n != 21 {
		t.Fatalf("count after a restart with space: %d, %v", n, err)
	}
}

// The reserve holds against what Pebble allocates ahead of the data: on
// a small disk the memtable (and with it the preallocated write-ahead
// log) is sized to the disk, and new data is refused while the free space
// is under the reserve plus that allocation, so a submit never leaves
// less than the reserve free.
func TestReserveCountsPebbleAllocation(t *testing.T) {
	ctx := context.Background()
	const total, reserve = 256 << 20, 128 << 20
	fs := newBudgetFS(total - 8<<20)
	fs.total = total
	s, err := Open(ctx, Options{Dir: t.TempDir(), fs: fs, MinFreeBytes: reserve, ManualSweep: true, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if mt := memTableFor(fs, s.opts.Dir); mt != 4<<20 {
		t.Fatalf("memtable for a 256 MiB disk: %d, want 4 MiB", mt)
	}
	pad := json.RawMessage(`{"pad":"` + strings.Repeat("x", 64<<10) + `"}`)
	for i := 0; ; i++ {
		_, err := s.Submit(ctx, norn.NewTask{Queue: "q", Spec: pad})
		if errors.Is(err, norn.ErrInsufficientStorage) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if free := fs.free(); free < reserve {
			t.Fatalf("after %d submits %s free, under the %s reserve", i+1, bytesText(free), bytesText(reserve))
		}
		if i > 10000 {
			t.Fatal("the reserve never refused")
		}
	}
	if free := fs.free(); free < reserve {
		t.Fatalf("%s free once refused, under the %s reserve", bytesText(free), bytesText(reserve))
	}
}
