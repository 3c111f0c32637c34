package postgres

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
)

// everyStatus puts tasks of every status into s, with histories that use
// task_history rows and entries kept in the row, and a log entry.
func everyStatus(t *testing.T, s *Store) map[string]string {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.Submit(ctx,
		norn.NewTask{ID: "scheduled", Queue: "q", Delay: norn.Duration(time.Hour)},
		norn.NewTask{ID: "dep", Queue: "held"},
		norn.NewTask{ID: "blocked", Queue: "q", DependsOn: []string{"dep"}},
		norn.NewTask{ID: "running", Queue: "run", Spec: json.RawMessage(`{"x":1}`), Labels: map[string]string{"k": "v"}},
		norn.NewTask{ID: "completed", Queue: "done"},
		norn.NewTask{ID: "aborted", Queue: "fail"},
		norn.NewTask{ID: "cancelled", Queue: "q"},
		norn.NewTask{ID: "ready", Queue: "idle", Priority: 3},
	)
	must(err)
	claim := func(q string) *norn.Task {
		t.Helper()
		got, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{q}, Timeout: norn.Duration(time.Hour)})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim %s: %v %v", q, got, err)
		}
		return got[0]
	}
	// running: claimed, yielded (history rows), claimed again (in the row), a log entry.
	r := claim("run")
	must(s.Yield(ctx, norn.LeaseRef{TaskID: r.ID, Worker: "w", Lease: r.Lease}))
	r = claim("run")
	_, err = s.AppendLog(ctx, norn.LeaseRef{TaskID: r.ID, Worker: "w", Lease: r.Lease}, norn.LogAppend{Data: json.RawMessage(`"step"`)})
	must(err)
	c := claim("done")
	must(s.Complete(ctx, norn.LeaseRef{TaskID: c.ID, Worker: "w", Lease: c.Lease}, json.RawMessage(`{"ok":true}`)))
	a := claim("fail")
	must(s.Abort(ctx, norn.LeaseRef{TaskID: a.ID, Worker: "w", Lease: a.Lease}, norn.ErrorInfo{Code: "boom"}))
	_, err = s.Cancel(ctx, "cancelled")
	must(err)
	return map[string]string{"scheduled": "scheduled", "dep": "ready", "blocked": "blocked", "running": "running",
		"completed": "completed", "aborted": "aborted", "cancelled": "cancelled", "ready": "ready"}
}

func allTasks(t *testing.T, s *Store) map[string]*norn.Task {
	t.Helper()
	p, err := s.List(context.Background(), norn.Query{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*norn.Task{}
	for _, tk := range p.Tasks {
		out[tk.ID] = tk
	}
	return out
}

// TestMigrationsKeepTasksOfEveryStatus migrates a database holding tasks of
// every status down to the previous schema version and up again: every
// task, its history and its log read back exactly as before, both schema
// versions hold the history (rows below, rows or in-row entries above), and
// the store carries on with the migrated tasks.
func TestMigrationsKeepTasksOfEveryStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	open := func() *Store { return openMigrated(t, url, schema) }
	s := open()
	want := everyStatus(t, s)
	before := allTasks(t, s)
	s.Close()
	for id, st := range want {
		if before[id] == nil || string(before[id].Status) != st {
			t.Fatalf("setup: task %s is %v, want %s", id, before[id], st)
		}
	}

	latest := LatestVersion()
	if _, err := Migrate(ctx, url, schema, latest-1); err != nil {
		t.Fatalf("migrate down: %v", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// Below, every entry is a task_history row again.
	var n int
	err = conn.QueryRow(ctx, `SELECT count(*) FROM `+quoteIdent(schema)+`.task_history WHERE type IN ('TaskAssignment', 'TaskComplete')`).Scan(&n)
	if err != nil || n != 5 {
		t.Fatalf("%d assignment and completion rows after migrating down (%v), want 5", n, err)
	}
	if _, err := Migrate(ctx, url, schema, latest); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	s = open()
	defer s.Close()
	after := allTasks(t, s)
	if len(after) != len(before) {
		t.Fatalf("%d tasks after the migrations, %d before", len(after), len(before))
	}
	for id, b := range before {
		if !reflect.DeepEqual(after[id], b) {
			ja, _ := json.Marshal(after[id])
			jb, _ := json.Marshal(b)
			t.Errorf("task %s changed:\nbefore %s\nafter  %s", id, jb, ja)
		}
	}
	log, err := s.ReadLog(ctx, "running", 0, 0)
	if err != nil || len(log) != 1 || string(log[0].Data) != `"step"` {
		t.Fatalf("log after the migrations: %v %v", log, err)
	}

	// The store carries on: the running task completes under its lease,
	// the dependency completes and releases its dependent.
	r := after["running"]
	if err := s.Complete(ctx, norn.LeaseRef{TaskID: r.ID, Worker: "w", Lease: r.Lease}, nil); err != nil {
		t.Fatalf("complete the migrated running task: %v", err)
	}
	got, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"held"}})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim dep: %v %v", got, err)
	}
	if err := s.Complete(ctx, norn.LeaseRef{TaskID: "dep", Worker: "w", Lease: got[0].Lease}, nil); err != nil {
		t.Fatal(err)
	}
	if tk, err := s.Get(ctx, "blocked"); err != nil || tk.Status != norn.StatusReady {
		t.Fatalf("dependent after its dependency completed: %v %v", tk, err)
	}
	done, err := s.Get(ctx, "running")
	if err != nil {
		t.Fatal(err)
	}
	var types []norn.HistoryType
	for _, h := range done.History {
		types = append(types, h.Type)
	}
	wantTypes := []norn.HistoryType{norn.TaskAssignment, norn.TaskYield, norn.TaskAssignment, norn.TaskComplete}
	if !reflect.DeepEqual(types, wantTypes) {
		t.Fatalf("history of the migrated task: %v, want %v", types, wantTypes)
	}
}

// openMigrated opens the store on schema, migrating it to the latest
// version first; the caller closes it.
func openMigrated(t *testing.T, url, schema string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{URL: url, Schema: schema, Migrate: true, DisableMonitor: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
