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

// TestMigrateDownAndUpAgain: migrating to version 0 removes every object
// the migrations made (the down steps undo the up steps), and migrating up
// again builds the same schema, on which the store works.
func TestMigrateDownAndUpAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, schema := pgtest.Schema(t)
	s := openMigrated(t, url, schema)
	want := everyStatus(t, s)
	before := allTasks(t, s)
	s.Close()
	for id, st := range want {
		if before[id] == nil || string(before[id].Status) != st {
			t.Fatalf("setup: task %s is %v, want %s", id, before[id], st)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	built := schemaObjects(t, conn, schema)
	if _, err := Migrate(ctx, url, schema, 0); err != nil {
		t.Fatalf("migrate down: %v", err)
	}
	if left := schemaObjects(t, conn, schema); len(left) != 1 || left[0] != "table schema_migrations" {
		t.Fatalf("after migrating to version 0 the schema holds %q, want only the migrations table", left)
	}
	if _, err := Migrate(ctx, url, schema, -1); err != nil {
		t.Fatalf("migrate up: %v", err)
	}
	if again := schemaObjects(t, conn, schema); !reflect.DeepEqual(again, built) {
		t.Fatalf("the schema built again differs:\nfirst %q\nagain %q", built, again)
	}
	s = openMigrated(t, url, schema)
	defer s.Close()
	if left := allTasks(t, s); len(left) != 0 {
		t.Fatalf("%d tasks after migrating down and up, want none", len(left))
	}
	everyStatus(t, s)
}

// schemaObjects lists schema's relations (with each index's definition
// and each table's columns) in a stable order.
func schemaObjects(t *testing.T, conn *pgx.Conn, schema string) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
SELECT CASE c.relkind WHEN 'r' THEN 'table ' WHEN 'i' THEN 'index ' WHEN 'v' THEN 'view ' WHEN 'S' THEN 'sequence ' ELSE c.relkind::text || ' ' END
	|| c.relname || coalesce(' ' || pg_get_indexdef(c.oid), '')
	|| coalesce(' (' || (SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
		FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind IN ('r', 'v')) || ')', '')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname NOT LIKE 'schema_migrations%'
UNION ALL SELECT 'table schema_migrations' FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = 'schema_migrations'
ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
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
