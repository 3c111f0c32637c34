package embedded_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/embedded"
)

// clock is a clock the example moves by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// A schedule submits a task at every tick of its cron expression, with an
// id derived from the tick, so a tick fires once however often the store
// sweeps. Here the clock is injected and the store sweeps only when told,
// which makes the firing deterministic; a store opened without them fires
// on its own.
func ExampleStore_PutSchedule() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "norn-example-")
	defer os.RemoveAll(dir)
	clk := &clock{now: time.Date(2030, 1, 2, 2, 59, 0, 0, time.UTC)}
	s, err := embedded.Open(ctx, embedded.Options{Dir: dir, Clock: clk, ManualSweep: true})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	sc, err := s.PutSchedule(ctx, norn.Schedule{Name: "nightly-report", Queue: "reports", Cron: "0 3 * * *"})
	if err != nil {
		panic(err)
	}
	fmt.Println("next fire", sc.NextFire.Format(time.RFC3339))

	clk.Add(time.Minute) // 03:00, the tick
	rep, _ := s.Sweep(ctx)
	again, _ := s.Sweep(ctx)
	fmt.Println("fired", rep.Fired, "then", again.Fired)

	sc, _ = s.GetSchedule(ctx, "nightly-report")
	t, _ := s.Get(ctx, sc.LastTask)
	fmt.Println(t.Queue, t.Status, "next fire", sc.NextFire.Format(time.RFC3339))
	// Output:
	// next fire 2030-01-02T03:00:00Z
	// fired 1 then 0
	// reports ready next fire 2030-01-03T03:00:00Z
}
