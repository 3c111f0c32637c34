package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/await"
	"github.com/nornq/norn/internal/pgtest"
)

// TestMonitorExpiresOnTime: with the real clock and its own monitor (no
// Sweep called), a task expires at its deadline, and the monitor's wake-up
// for it runs the expiry step: a due expiry left to the next full sweep
// would keep the monitor waking every few milliseconds until then.
func TestMonitorExpiresOnTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	s, err := Open(ctx, Config{URL: url, Schema: schema, Migrate: true, SweepInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	subs, err := s.Submit(ctx, norn.NewTask{Queue: "q", ExpireIn: norn.Duration(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	id := subs[0].Task.ID
	// The first full sweep runs at start; the expiry falls due after it.
	await.Until(t, 10*time.Second, "the task expired by the monitor", func() bool {
		g, err := s.Get(ctx, id)
		return err == nil && g.Status == norn.StatusAborted && g.Errors[len(g.Errors)-1].Code == norn.CodeExpired
	})
}
