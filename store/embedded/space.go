package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nornq/norn"
)

// space keeps free space in reserve on the data directory's file system.
//
// Pebble cannot survive running out of space in its write-ahead log: the
// write that meets ENOSPC breaks its commit pipeline, and any later write
// would crash the process. So the store refuses new data (submissions, log
// entries, schedules) before the disk is full, while the work already
// stored keeps moving inside the reserve: claims, heartbeats, completions,
// cancels, deletes and the monitor's duties write a few hundred bytes each
// and are what drains the disk. Once space is above the reserve again,
// writes resume by themselves.
//
// It is used under s.mu.
type space struct {
	fs       vfs.FS
	dir      string
	reserve  int64         // bytes; <= 0 turns the check off
	ahead    int64         // what Pebble may allocate at once, beyond the data (pebbleAhead)
	interval time.Duration // longest time between two looks at the disk

	log *slog.Logger

	checked time.Time // when the disk was last looked at (zero: never)
	avail   int64     // free bytes then
	written int64     // bytes committed since
	wasLow  bool      // at the last look, to log the changes
}

// low reports whether the free space is below the reserve, and the free
// space last seen. It looks at the disk again when the interval has passed
// or when what was written since the last look could have used half of the
// headroom above the reserve, so a burst of writes cannot run through the
// reserve between two looks.
func (sp *space) low() (bool, int64) {
	if sp.reserve <= 0 {
		return false, 0
	}
	headroom := sp.avail - sp.floor()
	if sp.checked.IsZero() || time.Since(sp.checked) >= sp.interval || (headroom > 0 && sp.written*2 >= headroom) {
		sp.refresh()
	}
	return sp.avail < sp.floor(), sp.avail
}

// floor is the free space below which new data is refused: the reserve
// plus what Pebble may take at once without a byte of new data (a new
// write-ahead log, preallocated, and a memtable flushed to a table), so
// that the reserve is still free after Pebble took it.
func (sp *space) floor() int64 { return sp.reserve + sp.ahead }

// pebbleAhead is what Pebble may allocate at once beyond the data: a new
// write-ahead log, which it preallocates to 110% of the memtable size, and
// a flush of a full memtable.
func pebbleAhead(memTable uint64) int64 { return int64(memTable)*11/10 + int64(memTable) + 1<<20 }

// memTableFor sizes Pebble's memtable to the data directory's file system:
// 1/64 of its size, between 4 and 64 MiB, so that what Pebble allocates
// ahead (pebbleAhead) stays a small part of a small disk.
func memTableFor(fs vfs.FS, dir string) uint64 {
	const lo, hi = 4 << 20, 64 << 20
	du, err := fs.GetDiskUsage(dir)
	if err != nil || du.TotalBytes == 0 {
		return hi
	}
	return min(max(du.TotalBytes/64, lo), hi) &^ (1<<20 - 1)
}

func (sp *space) refresh() {
	sp.checked = time.Now()
	sp.written = 0
	du, err := sp.fs.GetDiskUsage(sp.dir)
	if err != nil {
		// A file system that cannot say leaves the decision to the disk:
		// a write that meets ENOSPC is refused all the same.
		sp.avail = sp.floor()
		return
	}
	sp.avail = int64(min(du.AvailBytes, 1<<62))
	if low := sp.avail < sp.floor(); low != sp.wasLow {
		sp.wasLow = low
		if low {
			sp.log.Warn("embedded: free space on the disk of the data directory is below the reserve; refusing new tasks, log entries and schedules until space is freed",
				"dir", sp.dir, "free", bytesText(sp.avail), "reserve", bytesText(sp.reserve), "pebble_ahead", bytesText(sp.ahead))
		} else {
			sp.log.Info("embedded: free space on the disk of the data directory is above the reserve again; new data is accepted",
				"dir", sp.dir, "free", bytesText(sp.avail))
		}
	}
}

// wrote counts a commit of n bytes since the last look: twice, as each
// byte goes to the write-ahead log and again to a table when its memtable
// is flushed.
func (sp *space) wrote(n int) { sp.written += 2 * int64(n) }

// refusal is the error of a write refused by the reserve.
func (sp *space) refusal(avail int64) error {
	return norn.InsufficientStorage(fmt.Sprintf(
		"the disk of the data directory has %s free, below the %s the store keeps in reserve (plus %s its storage engine may allocate at once): new tasks, log entries and schedules are refused until space is freed (claims and finishing calls still work)",
		bytesText(avail), bytesText(sp.reserve), bytesText(sp.ahead)), nil)
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// errDiskFull refuses writes while a write waits for space.
func errDiskFull() error {
	return norn.InsufficientStorage("the disk of the data directory is full: nothing was written; writes resume by themselves once space is freed", nil)
}

// diskFull reports whether a write failed because the disk was full.
func diskFull(err error) bool { return errors.Is(err, syscall.ENOSPC) }

// writeErr classifies the error of a write Pebble could not make: a full
// disk is insufficient_storage (507), anything else unavailable (503).
func writeErr(err error) error {
	if diskFull(err) {
		return norn.InsufficientStorage("the disk of the data directory is full: the write was not made", err)
	}
	return norn.Unavailable(err)
}

// waitFS keeps a full disk from reaching Pebble where Pebble cannot survive
// it. A write to the write-ahead log or the MANIFEST that fails with ENOSPC
// would break Pebble's commit pipeline (every later write crashes the
// process) or crash it outright; waitFS instead marks the disk full (the
// store then refuses every new write with insufficient_storage, at once)
// and retries the rest of the write until space is freed. A failed write
// has written nothing beyond the bytes it reports, so retrying the rest is
// exact. The writes already queued when the disk filled are acknowledged
// once they are on disk; nothing is half-applied (a Pebble batch is one
// log record). Table files written by flushes and compactions keep
// Pebble's own handling (the job fails, its output is removed, it is
// retried), and a failed sync is never retried: after a failed fsync the
// kernel may have dropped the data, so the store stops instead (fail).
type waitFS struct {
	vfs.FS
	full     atomic.Bool
	failFast atomic.Bool   // while Open runs: a full disk fails the write, nobody waits
	stop     chan struct{} // closed by Close: waiting writes give up
	onFull   func(error)   // called when a write first meets a full disk
	onSpace  func()        // called when a waiting write got through
	backoff  time.Duration // first pause between retries, doubling to 1s
}

func newWaitFS(fs vfs.FS, onFull func(error), onSpace func()) *waitFS {
	return &waitFS{FS: fs, stop: make(chan struct{}), onFull: onFull, onSpace: onSpace, backoff: 10 * time.Millisecond}
}

// Unwrap is the underlying file system (vfs.Root follows it).
func (fs *waitFS) Unwrap() vfs.FS { return fs.FS }

func (fs *waitFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	base := fs.PathBase(name)
	if !strings.HasSuffix(base, ".log") && !strings.HasPrefix(base, "MANIFEST-") {
		return f, nil
	}
	return &waitFile{File: f, fs: fs}, nil
}

func (fs *waitFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *waitFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, o ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, o...)
	return fs.wrap(name, f, err)
}

func (fs *waitFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

// retry writes p with write until it is all written, waiting out ENOSPC.
func (fs *waitFS) retry(p []byte, write func([]byte) (int, error)) (int, error) {
	done := 0
	pause := fs.backoff
	waited := false
	for {
		n, err := write(p[done:])
		done += n
		if err == nil || !diskFull(err) || fs.failFast.Load() {
			if waited && err == nil {
				fs.full.Store(false)
				fs.onSpace()
			}
			return done, err
		}
		if !waited {
			waited = true
			if !fs.full.Swap(true) {
				fs.onFull(err)
			}
		}
		select {
		case <-fs.stop:
			return done, err
		case <-time.After(pause):
		}
		pause = min(2*pause, time.Second)
	}
}

type waitFile struct {
	vfs.File
	fs *waitFS
}

func (f *waitFile) Write(p []byte) (int, error) { return f.fs.retry(p, f.File.Write) }

func (f *waitFile) WriteAt(p []byte, off int64) (int, error) {
	start := off
	return f.fs.retry(p, func(b []byte) (int, error) {
		n, err := f.File.WriteAt(b, start)
		start += int64(n)
		return n, err
	})
}

// Preallocate is optional: on a full disk, skip it and let the writes
// themselves wait for space.
func (f *waitFile) Preallocate(off, n int64) error {
	if err := f.File.Preallocate(off, n); err != nil && !diskFull(err) {
		return err
	}
	return nil
}
