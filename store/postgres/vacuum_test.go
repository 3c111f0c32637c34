package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
)

func TestVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	s, err := Open(ctx, Config{URL: url, Schema: schema, Migrate: true, DisableMonitor: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	t.Run("VacuumsTheSchemasTaskTable", func(t *testing.T) {
		tasks := make([]norn.NewTask, 200)
		for i := range tasks {
			tasks[i] = norn.NewTask{Queue: "vac", Spec: []byte(`{"n":` + strings.Repeat("1", 100) + `}`)}
		}
		if _, err := s.Submit(ctx, tasks...); err != nil {
			t.Fatal(err)
		}
		if n, err := s.DeleteMatching(ctx, norn.Filter{Queues: []string{"vac"}}); err != nil || n != 200 {
			t.Fatalf("deleted %d, %v", n, err)
		}
		before := pgtest.VacuumCount(t, url, schema)
		if err := s.Vacuum(ctx); err != nil {
			t.Fatal(err)
		}
		if after := pgtest.VacuumCount(t, url, schema); after != before+1 {
			t.Fatalf("vacuum_count of %s.tasks went from %d to %d, want one more", schema, before, after)
		}
	})
	t.Run("ACancelledContextIsAnError", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := s.Vacuum(cctx); err == nil {
			t.Fatal("Vacuum with a cancelled context returned no error")
		}
	})
}
