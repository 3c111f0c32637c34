package clustertest

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
)

// TestScheduleSurvivesKilledNodes: three nodes fire a per-second schedule;
// the nodes are killed with SIGKILL one after the other, so whichever led
// the monitor and fired the ticks dies mid-cadence. Every tick from the
// first to the last yields exactly one task: none is lost (catch_up all
// fires the ticks missed during the takeover), none is fired twice.
func TestScheduleSurvivesKilledNodes(t *testing.T) {
	ctx := context.Background()
	pg := pgtest.NewCluster(t)
	const schema = "sched"
	nodes := startNodes(t, 3, pg.URL(), schema)
	conn := connect(t, pg.URL())
	tbl := pgx.Identifier{schema}.Sanitize()

	if _, err := nodes[2].c.PutSchedule(ctx, norn.Schedule{Name: "tick", Queue: "ticks", Cron: "@every 1s", CatchUp: norn.CatchUpAll}); err != nil {
		t.Fatal(err)
	}
	fired := func() (int64, error) {
		return count(ctx, conn, "SELECT count(*) FROM "+tbl+".tasks WHERE queue = 'ticks'")
	}
	for i, want := range []int64{3, 6} {
		waitFor(t, "ticks fired", 60*time.Second, func() (bool, error) {
			n, err := fired()
			return n >= want, err
		})
		nodes[i].kill()
		t.Logf("killed %s after %d ticks", nodes[i].name, want)
	}
	waitFor(t, "ticks fired by the last node", 60*time.Second, func() (bool, error) {
		n, err := fired()
		return n >= 12, err
	})
	if _, err := nodes[2].c.UpdateSchedule(ctx, "tick", norn.ScheduleUpdate{Paused: ptr(true)}); err != nil {
		t.Fatal(err)
	}

	rows, err := conn.Query(ctx, "SELECT id FROM "+tbl+".tasks WHERE queue = 'ticks'")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var ticks []time.Time
	seen := map[time.Time]bool{}
	for _, id := range ids {
		at, err := time.Parse("20060102T150405Z", strings.TrimPrefix(id, "schedule:tick:"))
		if err != nil {
			t.Fatalf("task %q is not a tick of the schedule: %v", id, err)
		}
		if seen[at] {
			t.Fatalf("tick %s fired twice", at)
		}
		seen[at] = true
		ticks = append(ticks, at)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Errorf("ticks %s and %s are %v apart: a tick was lost", ticks[i-1].Format(time.TimeOnly), ticks[i].Format(time.TimeOnly), d)
		}
	}
	t.Logf("%d ticks from %s to %s, each fired once", len(ticks), ticks[0].Format(time.TimeOnly), ticks[len(ticks)-1].Format(time.TimeOnly))
}

func ptr[T any](v T) *T { return &v }
