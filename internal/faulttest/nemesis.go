package faulttest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// A Fault is one thing the nemesis can do: Inject breaks something and
// returns the function that heals it (nil when nothing is left to heal),
// and Recovered, if set, reports when the system serves again afterwards.
type Fault struct {
	Name      string
	Inject    func(ctx context.Context) (heal func() error, target string, err error)
	Recovered func(ctx context.Context) error
}

// Event records one injected fault.
type Event struct {
	Fault    string
	Target   string
	Start    time.Time // injection began (before its target was chosen)
	Injected time.Time // injection returned: a SIGSTOP had been sent
	Healed   time.Time // heal returned
	Recovery time.Duration
	Err      error
}

// Nemesis injects faults on a schedule and records what it did.
type Nemesis struct {
	// Hold is how long a fault lasts before it is healed, per fault name
	// (default 3s); Quiet is the pause between faults.
	Hold  map[string]time.Duration
	Quiet time.Duration

	mu     sync.Mutex
	events []Event
}

// Run injects faults in order, one at a time, until they are all done (or,
// with loop, until ctx ends).
func (nm *Nemesis) Run(ctx context.Context, faults []Fault, loop bool) {
	for i := 0; ctx.Err() == nil; i++ {
		if i == len(faults) {
			if !loop {
				return
			}
			i = 0
		}
		f := faults[i]
		ev := Event{Fault: f.Name, Start: time.Now()}
		heal, target, err := f.Inject(ctx)
		ev.Injected = time.Now()
		ev.Target = target
		if err != nil {
			ev.Err = err
		} else {
			hold := nm.Hold[f.Name]
			if hold == 0 {
				hold = 3 * time.Second
			}
			if heal != nil {
				// Held for its whole time even when ctx ends meanwhile (the
				// end of a soak): the checks judge a fault by what it was
				// meant to cause, and a SIGSTOP cut short to a few seconds
				// is shorter than the takeover it is checked for (a soak
				// failed that way). ctx ending stops new faults only.
				time.Sleep(hold)
				if err := heal(); err != nil {
					ev.Err = err
				}
			}
			ev.Healed = time.Now()
			if f.Recovered != nil && ev.Err == nil {
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
				if err := f.Recovered(rctx); err != nil {
					ev.Err = fmt.Errorf("not recovered: %w", err)
				}
				cancel()
				ev.Recovery = time.Since(ev.Healed)
			}
		}
		nm.mu.Lock()
		nm.events = append(nm.events, ev)
		nm.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(nm.Quiet):
		}
	}
}

// Events returns what was injected so far.
func (nm *Nemesis) Events() []Event {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	return append([]Event(nil), nm.events...)
}

// Summary is one line per fault kind: how often, and recovery times
// (median and max).
func (nm *Nemesis) Summary() string {
	by := map[string][]time.Duration{}
	for _, e := range nm.Events() {
		by[e.Fault] = append(by[e.Fault], e.Recovery)
	}
	names := make([]string, 0, len(by))
	for k := range by {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, k := range names {
		ds := by[k]
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		fmt.Fprintf(&b, "  %-10s ×%-3d recovery median %v, max %v\n", k, len(ds),
			ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)-1].Round(time.Millisecond))
	}
	return b.String()
}
