package bench

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/nornq/norn/internal/pgtest"
	"github.com/nornq/norn/store/postgres"
)

// On Postgres a run's cleanup deletes its tasks and vacuums the task table,
// so the next run does not insert into (or share the machine with the
// vacuum of) this one's dead rows.
func TestCleanupVacuumsPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	st, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema, Migrate: true, DisableMonitor: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := Work(ctx, st, Env{Store: "postgres", Transport: "inproc"}, Config{Tasks: 300, Workers: 2, ClaimBatch: 50})
	if err != nil {
		t.Fatal(err)
	}
	if r.Tasks != 300 {
		t.Fatalf("worked %d tasks, want 300", r.Tasks)
	}
	checkEmpty(t, st)
	vacuums := pgtest.VacuumCount(t, url, schema)
	if vacuums < 1 {
		t.Fatalf("the task table was vacuumed %d times after the run's cleanup, want at least once", vacuums)
	}
}
