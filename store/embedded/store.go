// Package embedded is Norn's in-process store: Pebble holds the durable
// records, in-memory indexes make claims O(log n) and time-driven duties
// event-driven. One process owns a data directory at a time.
//
// See docs/design.md for the key schema, the indexes, group commit and the
// recovery path.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/nornq/norn"
)

// Durability says when a write is acknowledged.
type Durability int

const (
	// Strict acknowledges a write only after it is synced to disk; writers
	// that commit concurrently share one sync (group commit). A crash loses
	// nothing acknowledged.
	Strict Durability = iota
	// Opportunistic acknowledges a write once it is applied and syncs it
	// shortly after (within Options.SyncInterval). A crash of the process
	// loses nothing (the OS holds the data); a crash of the machine may lose
	// the last SyncInterval of writes.
	Opportunistic
)

// String names the mode ("strict", "opportunistic").
func (d Durability) String() string {
	if d == Opportunistic {
		return "opportunistic"
	}
	return "strict"
}

// ParseDurability parses "strict" or "opportunistic" ("" is strict).
func ParseDurability(s string) (Durability, error) {
	switch s {
	case "", "strict":
		return Strict, nil
	case "opportunistic":
		return Opportunistic, nil
	}
	return Strict, norn.Invalid("durability", "unknown durability %q (want strict or opportunistic)", s)
}

// Options configure Open.
type Options struct {
	// Dir is the data directory (required). It is created if missing and
	// locked for the life of the store.
	Dir string
	// Durability: Strict (the default) or Opportunistic.
	Durability Durability
	// SyncInterval bounds how long an opportunistic write stays unsynced.
	// Default 50ms. Ignored in Strict mode.
	SyncInterval time.Duration
	// Clock is the time source. Default norn.SystemClock.
	Clock norn.Clock
	// HistoryLimit caps each task's history (oldest dropped). Default
	// norn.DefaultHistoryLimit.
	HistoryLimit int
	// Logger receives operational messages. Default slog.Default().
	Logger *slog.Logger
	// ManualSweep disables the background monitor so that only Sweep runs
	// the time-driven duties. Default false. Tests driving a fake clock set
	// it to make every duty happen exactly when they call Sweep.
	ManualSweep bool
	// EventBuffer is the per-subscriber event buffer; a subscriber that
	// falls further behind gets EventLagged. Default 1024.
	EventBuffer int
	// CacheSize is Pebble's block cache in bytes, beyond the memtables
	// (which Pebble counts against the same cache; the store adds room for
	// two). Default 64 MiB.
	CacheSize int64
	// Observer receives background measurements (schedule lateness).
	// Default none.
	Observer norn.Observer

	// MinFreeBytes is the free space kept in reserve on the data
	// directory's file system. Below it, transactions that add data (new
	// tasks, log entries, schedules) fail with insufficient_storage, while
	// claims, heartbeats, finishing calls, cancels, deletes and the
	// monitor's duties go on inside the reserve; writes resume by themselves
	// once space is freed. Default 128 MiB; negative turns the check off.
	MinFreeBytes int64

	// fs replaces the real filesystem in tests that inject disk faults.
	fs vfs.FS
	// spaceInterval is the longest time between two looks at the free
	// space. Default 1s.
	spaceInterval time.Duration
	// memTableSize is Pebble's memtable size, for tests. Default 64 MiB.
	memTableSize uint64
}

// Store is the embedded norn.Store. It is safe for concurrent use.
type Store struct {
	opts  Options
	db    *pebble.DB
	clock norn.Clock
	log   *slog.Logger

	// life guards Close against in-flight calls: every call holds it shared.
	life   sync.RWMutex
	closed atomic.Bool
	done   chan struct{}

	// mu guards every in-memory index below. It is never held while user
	// code runs or while waiting for a sync.
	mu sync.Mutex
	// keyPruned is when the sweep last forgot full key buckets (ns of the
	// store's clock; keyrate.go).
	keyPruned int64
	tasks     taskIndex
	queues    map[string]*queue
	// timers holds the tasks with a pending time-driven duty (run_at,
	// retention expiry) by due time, leases the running tasks by lease
	// deadline. Apart because a burn-down moves every task from one to
	// the other: a claim's deadline in a heap of a million retention
	// timers was sifted up through all of its levels and sifted down again
	// at completion; in a heap of the running tasks alone it is cheap, and
	// a retention timer, usually the latest of all, stays where it is
	// pushed, at the end (docs/internals/embedded-performance.md).
	timers  timerHeap
	leases  timerHeap
	workers map[string]*workerRec
	// dependents maps a task to the tasks waiting for it.
	dependents map[*task][]*task
	// unique maps a queue and unique key to every task submitted with it
	// that still exists (live or ended); uniqueOf is the reverse, for
	// deletion. Only tasks with a key are in either.
	unique   map[norn.UniqueRef][]*task
	uniqueOf map[*task]string
	// byDep and depsOf are the depends_on index (depindex.go).
	byDep     map[string][]*task
	depsOf    map[*task][]string
	schedules map[string]*norn.Schedule
	// batches are the batches by id; members and batchOf the batch
	// membership (of tasks that name a batch, whether or not it still
	// exists); batchDue the batches whose callbacks may fire (batch.go).
	batches  map[string]*batchMem
	members  map[string]map[*task]struct{}
	batchOf  map[*task]string
	batchDue map[string]bool
	// seqs are the sequences by queue and key, seqOf every member's key
	// (sequence.go).
	seqs  map[seqRef]*seqMem
	seqOf map[*task]string
	// runOnFail holds the tasks with on_dependency_failure run.
	runOnFail map[*task]struct{}
	workerSeq uint64
	armedAt   int64
	failed    error // a write failed: memory may be ahead of disk, refuse writes
	space     space
	disk      *waitFS // holds writes that met a full disk

	monitor *monitor // nil with ManualSweep
	syncer  *syncer  // nil in strict mode

	subMu   sync.Mutex
	subs    map[*subscription]struct{}
	hasSubs atomic.Bool // lets writers skip building events nobody reads
}

type workerRec struct {
	n         uint64
	info      norn.WorkerInfo
	persisted int64 // LastSeen as last written to disk
}

var _ norn.Store = (*Store)(nil)

// withDefaults checks opts and fills in the documented defaults.
func (opts Options) withDefaults() (Options, error) {
	if opts.Dir == "" {
		return opts, norn.Invalid("dir", "data directory is required")
	}
	if opts.Durability != Strict && opts.Durability != Opportunistic {
		return opts, norn.Invalid("durability", "unknown durability %d", opts.Durability)
	}
	if opts.HistoryLimit < 0 || opts.SyncInterval < 0 || opts.EventBuffer < 0 || opts.CacheSize < 0 {
		return opts, norn.Invalid("options", "limits must not be negative")
	}
	if opts.Clock == nil {
		opts.Clock = norn.SystemClock{}
	}
	if opts.HistoryLimit == 0 {
		opts.HistoryLimit = norn.DefaultHistoryLimit
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.SyncInterval == 0 {
		opts.SyncInterval = 50 * time.Millisecond
	}
	if opts.EventBuffer == 0 {
		opts.EventBuffer = 1024
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = 64 << 20
	}
	if opts.MinFreeBytes == 0 {
		opts.MinFreeBytes = 128 << 20
	}
	if opts.spaceInterval == 0 {
		opts.spaceInterval = time.Second
	}
	return opts, nil
}

// Open opens (creating if needed) the store in opts.Dir, rebuilding the
// in-memory indexes from disk. A directory already opened by another store
// (in this or another process) is refused with an error naming it.
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("embedded: data directory %s: %w", opts.Dir, err)
	}
	var base vfs.FS = vfs.Default
	if opts.fs != nil {
		base = opts.fs
	}
	memTable := opts.memTableSize
	if memTable == 0 {
		memTable = memTableFor(base, dir)
	}
	// Pebble reserves every memtable's size in the block cache: with the
	// cache no larger than one full memtable, once memtables had grown to
	// their size (after the first 100 MB or so written) there was no room
	// left and no block was ever cached (a 1M burn-down: 245,699 misses,
	// 0 hits). Room for the mutable memtable and one being flushed.
	cache := pebble.NewCache(opts.CacheSize + 2*int64(memTable))
	defer cache.Unref()
	popts := pebbleOptions(opts, cache, memTable)
	disk := newWaitFS(base,
		func(err error) {
			opts.Logger.Error("embedded: the disk of the data directory is full; refusing writes until space is freed",
				"dir", dir, "err", err)
		},
		func() {
			opts.Logger.Info("embedded: space was freed on the disk of the data directory; writes resume", "dir", dir)
		})
	popts.FS = disk
	// Pebble's default reaction to a checksum mismatch is a fatal log (a
	// crash). Report it instead: the read (or Open) fails with the error,
	// and the log names the file.
	var corrupt atomic.Pointer[string]
	popts.EventListener = &pebble.EventListener{DataCorruption: func(info pebble.DataCorruptionInfo) {
		corrupt.CompareAndSwap(nil, &info.Path)
		opts.Logger.Error("embedded: corrupt data file", "file", info.Path, "err", info.Details)
	}}
	db, noSpace, err := openPebble(dir, popts, disk, pebbleAhead(memTable))
	if err != nil {
		return nil, openErr(dir, err)
	}
	if noSpace != nil {
		opts.Logger.Error("embedded: "+noSpace.Error(), "dir", dir)
	}
	s := &Store{
		opts:       opts,
		db:         db,
		clock:      opts.Clock,
		log:        opts.Logger,
		done:       make(chan struct{}),
		tasks:      newTaskIndex(),
		queues:     map[string]*queue{},
		workers:    map[string]*workerRec{},
		dependents: map[*task][]*task{},
		unique:     map[norn.UniqueRef][]*task{},
		uniqueOf:   map[*task]string{},
		byDep:      map[string][]*task{},
		depsOf:     map[*task][]string{},
		schedules:  map[string]*norn.Schedule{},
		batches:    map[string]*batchMem{},
		members:    map[string]map[*task]struct{}{},
		batchOf:    map[*task]string{},
		batchDue:   map[string]bool{},
		runOnFail:  map[*task]struct{}{},
		seqs:       map[seqRef]*seqMem{},
		seqOf:      map[*task]string{},
		subs:       map[*subscription]struct{}{},
		disk:       disk,
		space: space{fs: base, dir: dir, reserve: opts.MinFreeBytes, ahead: pebbleAhead(memTable),
			interval: opts.spaceInterval, log: opts.Logger},
		failed: noSpace,
	}
	if err := s.load(ctx); err != nil {
		db.Close()
		if p := corrupt.Load(); p != nil {
			return nil, fmt.Errorf("embedded: data file %s is corrupt: %w", *p, err)
		}
		return nil, fmt.Errorf("embedded: rebuild indexes from %s: %w", dir, err)
	}
	if noSpace != nil {
		// Read-only: nothing to sweep or sync until a restart with space.
		return s, nil
	}
	if !opts.ManualSweep {
		s.monitor = newMonitor(monitorParams{arm: s.armMonitor, now: s.now, sweep: s.monitorSweep, logger: s.log})
		s.monitor.start()
	}
	if opts.Durability == Opportunistic {
		s.syncer = newSyncer(syncerParams{interval: opts.SyncInterval, sync: s.backgroundSync})
		s.syncer.start()
	}
	return s, nil
}

func isLockErr(err error) bool {
	msg := err.Error()
	for _, m := range []string{"lock held", "resource temporarily unavailable", "LOCK", "locked"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// pebbleLogger routes Pebble's messages to slog at debug level (info and
// errors from Pebble are operationally interesting only when debugging).
// pebbleOptions are the data directory's Pebble options (the file system
// and the event listener are set by Open).
func pebbleOptions(opts Options, cache *pebble.Cache, memTable uint64) *pebble.Options {
	o := &pebble.Options{
		Cache:                       cache,
		MemTableSize:                memTable,
		MemTableStopWritesThreshold: 4,
		// Much of what a task queue writes is soon rewritten: a task's
		// state record at its claim and again at its end, its history,
		// then the whole task after its retention. Letting L0 collect 8
		// flushed memtables before compacting them into the levels below
		// (Pebble's default is 4) merges more of those versions in one
		// pass, so fewer of them are rewritten level after level: a 1M
		// burn-down spent 8% less CPU in the whole process, 3M 14% less
		// (docs/internals/embedded-performance.md). Reads merge up to 8 L0 files; the
		// in-memory indexes answer most lookups without Pebble.
		L0CompactionThreshold: 8,
		L0StopWritesThreshold: 40,
		Logger:                newPebbleLogger(opts.Logger),
		// WAL sync chunks record how far the log was synced, so that on
		// replay a corrupt record followed by synced data is reported as
		// corruption instead of being taken for a torn tail (which would
		// silently drop every later record). Opening an older directory
		// upgrades it.
		FormatMajorVersion: pebble.FormatWALSyncChunks,
	}
	// Data blocks of 16 KiB instead of Pebble's 4 KiB (the levels below
	// L0 inherit it). A claim reads its tasks' records in key order, so a
	// burn-down reads every block of the submitted tasks once: each block
	// read costs a cache allocation (C calloc), a read call, a checksum and
	// an index step, and with blocks four times larger reading the claimed
	// tasks back took a quarter less CPU (docs/internals/embedded-performance.md).
	// A read of one uncached task decompresses 16 KiB instead of 4.
	o.Levels[0].BlockSize = 16 << 10
	return o
}

// openPebble opens the data directory for writing, or, on a disk too full
// for that (less free than Pebble allocates at once: need), read-only:
// then noSpace says why, reads are served and every write is refused with
// it. While the writable open runs a full disk fails its writes instead
// of waiting for space (waitFS), so that it gives up rather than hang.
func openPebble(dir string, popts *pebble.Options, disk *waitFS, need int64) (db *pebble.DB, noSpace error, err error) {
	avail := int64(-1)
	if du, err := disk.FS.GetDiskUsage(dir); err == nil {
		avail = int64(min(du.AvailBytes, 1<<62))
	} else if du, err := disk.FS.GetDiskUsage(filepath.Dir(dir)); err == nil {
		avail = int64(min(du.AvailBytes, 1<<62))
	}
	if avail < 0 || avail >= need {
		disk.failFast.Store(true)
		db, err = pebble.Open(dir, popts)
		disk.failFast.Store(false)
		if err == nil || !diskFull(err) {
			return db, nil, err
		}
	}
	ro := *popts
	ro.ReadOnly = true
	if db, err = pebble.Open(dir, &ro); err != nil {
		return nil, nil, err
	}
	return db, norn.InsufficientStorage(fmt.Sprintf(
		"the disk of the data directory %s has %s free, less than the %s the store needs to start writing: it serves reads only; free space and restart it",
		dir, bytesText(max(avail, 0)), bytesText(need)), syscall.ENOSPC), nil
}

// openErr says what went wrong opening the data directory.
func openErr(dir string, err error) error {
	if isLockErr(err) {
		return fmt.Errorf("embedded: data directory %s is in use by another store (locked): %w", dir, err)
	}
	if pebble.IsCorruptionError(err) && strings.Contains(err.Error(), "WAL") {
		// Pebble does not say which log; name the candidates.
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		return fmt.Errorf("embedded: write-ahead log %s is corrupt (not a torn tail: synced records follow the damage): %w",
			strings.Join(logs, ", "), err)
	}
	return fmt.Errorf("embedded: open data directory %s: %w", dir, err)
}

// pebbleLogger passes Pebble's messages on: informational ones at debug
// level, errors at most once a minute for each kind (its message with
// the numbers taken out), with the count of those left out, since a
// background job failing on a full disk retries hundreds of times a second.
type pebbleLogger struct {
	l    *slog.Logger
	mu   sync.Mutex
	seen map[string]*logRate
}

type logRate struct {
	last    time.Time
	dropped int
}

func newPebbleLogger(l *slog.Logger) *pebbleLogger {
	return &pebbleLogger{l: l, seen: map[string]*logRate{}}
}

// pebbleLogEvery is how often one kind of Pebble error is logged at most.
const pebbleLogEvery = time.Minute

func (p *pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (p *pebbleLogger) Errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	kind := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, msg)
	p.mu.Lock()
	r := p.seen[kind]
	if r == nil {
		if len(p.seen) > 1000 {
			clear(p.seen) // bounded: kinds are few; this only guards memory
		}
		r = &logRate{}
		p.seen[kind] = r
	}
	if !r.last.IsZero() && time.Since(r.last) < pebbleLogEvery {
		r.dropped++
		p.mu.Unlock()
		return
	}
	dropped := r.dropped
	r.last, r.dropped = time.Now(), 0
	p.mu.Unlock()
	if dropped > 0 {
		p.l.Error(msg, "component", "pebble", "same_errors_not_logged", dropped)
		return
	}
	p.l.Error(msg, "component", "pebble")
}

func (p *pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
	panic(fmt.Sprintf(format, args...))
}

// enter marks a call in flight; it fails once Close has begun.
func (s *Store) enter() error {
	s.life.RLock()
	if s.closed.Load() {
		s.life.RUnlock()
		return norn.ErrClosed
	}
	return nil
}

func (s *Store) exit() { s.life.RUnlock() }

// Close stops the monitor, wakes waiting claimers and subscribers, syncs and
// closes the database. It is safe to call more than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.done)
	// Writes waiting for space give up (fail, not acknowledged): a full
	// disk must not hold Close, which waits for the calls in flight.
	close(s.disk.stop)
	s.mu.Lock()
	for _, q := range s.queues {
		for w := range q.waiters {
			w.wake()
		}
	}
	s.mu.Unlock()
	if s.monitor != nil {
		s.monitor.shutdown()
	}
	if s.syncer != nil {
		s.syncer.shutdown()
	}
	s.life.Lock() // waits for calls in flight
	defer s.life.Unlock()
	s.subMu.Lock()
	for sub := range s.subs {
		sub.closeLocked()
	}
	s.subMu.Unlock()
	var err error
	s.mu.Lock()
	failed := s.failed
	s.mu.Unlock()
	if failed == nil && !s.disk.full.Load() {
		// After a failed write Pebble's commit pipeline is broken and any
		// further write would crash the process; there is nothing to sync.
		err = s.syncWAL()
	}
	if cerr := s.db.Close(); err == nil {
		err = cerr
	}
	return err
}

func (s *Store) now() int64 { return s.clock.Now().UnixNano() }

// queue returns the named queue, creating it with defaults.
func (s *Store) queue(name string) *queue {
	q := s.queues[name]
	if q == nil {
		q = &queue{name: name, defaults: norn.DefaultQueueDefaults(), waiters: map[*waiter]struct{}{},
			keys: map[string]*keyGroup{}}
		q.nokey = &keyGroup{q: q, topIdx: -1}
		s.queues[name] = q
	}
	return q
}

// armMonitor returns the earliest timer for the monitor to sleep until,
// recording that it does (so transactions know when to wake it).
func (s *Store) armMonitor() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armedAt = s.nextTimer()
	return s.armedAt
}

// monitorSweep is the monitor's sweep: false once the store is closing.
func (s *Store) monitorSweep() (bool, error) {
	if err := s.enter(); err != nil {
		return false, nil
	}
	defer s.exit()
	_, err := s.sweep(context.Background())
	return true, err
}

// backgroundSync is the syncer's sync. A failure stops writes: what was
// acknowledged since the last sync may not be on disk, so nothing more is.
func (s *Store) backgroundSync() error {
	s.mu.Lock()
	failed := s.failed
	s.mu.Unlock()
	if failed != nil {
		return failed
	}
	err := s.syncWAL()
	if err != nil {
		s.mu.Lock()
		s.fail(err)
		s.mu.Unlock()
	}
	return err
}

// syncWAL makes everything applied so far durable. It waits for the sync
// the way strict writes do (ApplyNoSyncWait, then SyncWait): a synchronous
// Apply whose sync fails makes Pebble treat it as a fatal commit error and
// crash the process, instead of returning the error.
func (s *Store) syncWAL() error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.LogData(nil, nil); err != nil {
		return err
	}
	if err := s.db.ApplyNoSyncWait(b, pebble.Sync); err != nil {
		return err
	}
	return b.SyncWait()
}

// fail puts the store in the failed state after a write or sync error: it
// refuses every later write (memory may be ahead of disk) until reopened,
// and says so in the log and in Ready. Called with s.mu held.
func (s *Store) fail(err error) {
	if s.failed != nil {
		return
	}
	s.failed = err
	s.log.Error("embedded: write to the data directory failed; refusing writes until the store is reopened",
		"dir", s.opts.Dir, "err", err)
}

// Ready reports whether the store accepts writes: nil, or why not: the
// write error that stopped it (unavailable, or insufficient_storage when
// the disk was full), or a full disk that writes wait on. Reads keep
// working either way. The server's /readyz reports it.
func (s *Store) Ready(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return s.failedErr()
	}
	if s.closed.Load() {
		return norn.ErrClosed
	}
	if s.disk.full.Load() {
		return errDiskFull()
	}
	// Below the free-space reserve the store stays ready: it refuses new
	// data but serves the claims and finishing calls that drain the disk,
	// and a load balancer must keep sending them. The log says so.
	return nil
}

// failedErr is the error of a write refused because an earlier one failed.
// Called with s.mu held and s.failed set.
func (s *Store) failedErr() error {
	var ne *norn.Error
	if errors.As(s.failed, &ne) && ne.Code == norn.CodeInsufficientStorage {
		return ne // opened read-only on a full disk: the error says why
	}
	err := fmt.Errorf("embedded: writes stopped after a failed write to %s; reopen the store: %w", s.opts.Dir, s.failed)
	if diskFull(s.failed) {
		return norn.InsufficientStorage("the disk of the data directory was full when a write was made", err)
	}
	return norn.Unavailable(err)
}
