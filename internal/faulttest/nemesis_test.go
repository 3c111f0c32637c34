package faulttest

import (
	"context"
	"testing"
	"time"
)

// The end of a soak stops new faults but does not cut the one in progress
// short: a SIGSTOP healed after 3 s instead of 10 s was then judged against
// a takeover that takes about 5 s, and failed a soak.
func TestNemesisHoldsAFaultToItsEnd(t *testing.T) {
	const hold = 300 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	injected := 0
	f := Fault{Name: "pause", Inject: func(context.Context) (func() error, string, error) {
		injected++
		time.AfterFunc(hold/10, cancel) // the run ends while the fault holds
		return func() error { return nil }, "a (leader)", nil
	}}
	nm := &Nemesis{Hold: map[string]time.Duration{"pause": hold}}
	nm.Run(ctx, []Fault{f}, true)
	evs := nm.Events()
	if injected != 1 || len(evs) != 1 {
		t.Fatalf("%d faults injected, %d recorded; want one of each", injected, len(evs))
	}
	if held := evs[0].Healed.Sub(evs[0].Start); held < hold {
		t.Fatalf("the fault was healed after %v, before its %v hold", held, hold)
	}
}
