// Package storetest is the conformance suite every norn.Store must pass: the
// embedded store, the Postgres store and the HTTP client (through a real
// server) all run it unchanged, so they behave the same.
package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// Factory returns a fresh, empty store that reads time from clock. It must
// register its own cleanup (t.Cleanup) to close the store and remove data.
type Factory func(t *testing.T, clock norn.Clock) norn.Store

// FakeClock is a manually advanced clock. Stores read it through
// norn.Clock; tests move it with Advance and then call Store.Sweep so
// timeouts, delays, backoffs and retention happen without sleeping.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock starts at a fixed, whole-microsecond instant (Postgres keeps
// microseconds, so times round-trip exactly).
func NewFakeClock() *FakeClock {
	return &FakeClock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the current fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Set moves the clock to t.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}
