// Package gcfloor keeps the Go garbage collector's heap goal from falling
// below a floor, for the norn binary.
//
// A Norn node's live heap is small (a few MB serving Postgres, unless the
// embedded store holds a large backlog) while it allocates fast: every
// claimed task is decoded into a fresh struct, every HTTP request and
// response is buffered. With Go's default GOGC of 100 the heap goal is twice
// the live heap — 4 to 5 MB — so the collector ran 20–30 times a second in a
// Postgres burn-down and took about half of the process's CPU per task
// (docs/internals/postgres-store.md, "What a task costs"). A floor of a few
// tens of MB removes most of those cycles at a bounded cost in memory,
// while a large live heap (the embedded store at a million tasks) keeps
// GOGC's proportional goal: the floor only ever raises the goal to itself.
//
// The goal is recomputed after every collection (a finalizer re-armed each
// cycle) from the heap that collection found live, so a percentage chosen
// for a small heap never stays in force once the heap has grown.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Default is the norn binary's floor: 32 MiB. Measured with
// norn bench work: a goal of about 10 MB already took most of the
// collector's share, and 32 MiB leaves room for bursts at a cost that is
// small next to a server's other memory.
const Default = 32 << 20

// FromEnv starts the Default floor for the rest of the process, unless
// the environment already tunes the collector (GOGC or GOMEMLIMIT set): an
// operator's explicit choice wins, and GOGC=100 restores Go's own
// behaviour. Calls after the first do nothing (tests run the command line's
// entry point many times in one process).
func FromEnv() {
	fromEnv.Do(func() {
		if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
			return
		}
		Start(Default)
	})
}

var fromEnv sync.Once

// maxPercent bounds the GOGC value the floor may set: between a collection
// and the finalizer that re-tunes after it, the goal is the new live heap
// times the old percentage, so a live heap that jumped within one cycle can
// at most grow to maxPercent/100+1 times itself before the next correction.
const maxPercent = 1600

// Percent returns the GOGC value that puts the next heap goal at floor
// bytes for a live heap of live bytes, and never less than base (GOGC's
// own value, 100 unless set): the goal is live × (1 + percent/100).
func Percent(live, floor uint64, base int) int {
	if live == 0 {
		live = 1
	}
	if floor <= live {
		return base
	}
	p := (floor - live) * 100 / live
	if p > maxPercent {
		p = maxPercent
	}
	if int(p) < base {
		return base
	}
	return int(p)
}

// Start raises the heap goal to floor bytes (within maxPercent) while the
// live heap is below half of it, until the returned function is called,
// which puts GOGC's value back. It changes a process-wide setting: call it
// from a main package, once.
func Start(floor uint64) (stop func()) {
	g := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(g)
	base := int(g[0].Value.Uint64())
	if base <= 0 {
		// GOGC=off: the collector runs only at a memory limit; a floor
		// has nothing to raise.
		return func() {}
	}
	var mu sync.Mutex // stop against a finalizer setting a percentage
	stopped := false
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := base
	var arm func()
	arm = func() {
		s := new(sentinel)
		runtime.SetFinalizer(s, func(*sentinel) {
			mu.Lock()
			defer mu.Unlock()
			if stopped {
				return
			}
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 {
				if p := Percent(sample[0].Value.Uint64(), floor, base); p != current {
					debug.SetGCPercent(p)
					current = p
				}
			}
			arm()
		})
	}
	arm()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			stopped = true
			debug.SetGCPercent(base)
		}
	}
}

// sentinel is the object whose finalizer runs after each collection. It is
// bigger than the allocator's 16-byte tiny blocks, whose finalizers may
// never run (they share a block with other objects).
type sentinel struct{ _ [32]byte }
