package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
)

// TestWorkflowCommands: submit --on-dependency-failure, and get showing
// dependency results, dependents and awaits, against a real server
// process through the OpenAPI-checking proxy.
func TestWorkflowCommands(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir())
	ctx := context.Background()
	c, err := client.New(s.url)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.RegisterWorker(ctx, norn.WorkerInfo{Name: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	// claim takes the one ready task of queue.
	claim := func(queue string) norn.LeaseRef {
		t.Helper()
		ts, err := c.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{queue}})
		if err != nil || len(ts) != 1 {
			t.Fatalf("claim %s: %v, %v", queue, ts, err)
		}
		return norn.LeaseRef{TaskID: ts[0].ID, Worker: w, Lease: ts[0].Lease}
	}

	s.ok(t, "submit", "fetch", `{}`, "--id", "a")
	s.ok(t, "submit", "fetch", `{}`, "--id", "b")
	s.ok(t, "submit", "report", `{}`, "--id", "r", "--depends-on", "a,b", "--on-dependency-failure", "run")
	s.ok(t, "submit", "report", `{}`, "--id", "strict", "--depends-on", "b")
	s.fails(t, 2, `--on-dependency-failure: must be "abort"`, "submit", "report", "--depends-on", "a", "--on-dependency-failure", "skip")
	s.fails(t, 2, "needs --depends-on", "submit", "report", "--on-dependency-failure", "run")

	s.fails(t, 2, "--batch cannot be combined with --depends-on", "submit", "--batch", "-", "--on-dependency-failure", "run")
	nd := filepath.Join(t.TempDir(), "tasks.ndjson")
	if err := os.WriteFile(nd, []byte(`{"id":"viafile","queue":"later","depends_on":["a"],"on_dependency_failure":"run"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.ok(t, "submit", "--batch", nd)
	mustContain(t, "NDJSON policy", s.ok(t, "get", "viafile"), "on_dependency_failure:", "run")

	mustContain(t, "a before it ends", s.ok(t, "get", "a"), "dependents:", "2 (")
	mustContain(t, "r while blocked", s.ok(t, "get", "r"), "status:", "blocked", "on_dependency_failure:", "run", "0 of 2 ended")
	mustContain(t, "strict", s.ok(t, "get", "strict"), "on_dependency_failure:", "abort")

	if err := c.Complete(ctx, claim("fetch"), json.RawMessage(`{"rows":7}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Abort(ctx, claim("fetch"), norn.ErrorInfo{Code: "upstream_down", Description: "503 from the source"}); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "r once both ended", s.ok(t, "get", "r"), "status:", "ready", "2 of 2 ended",
		"completed {\"rows\":7}", "aborted: upstream_down: 503 from the source")
	mustContain(t, "b's dependents", s.ok(t, "get", "b"), "dependents:", "2 (")
	mustContain(t, "strict aborted", s.ok(t, "get", "strict"), "aborted", "dependency_failed")
	var got norn.Task
	if err := json.Unmarshal([]byte(s.ok(t, "get", "r", "-o", "json")), &got); err != nil {
		t.Fatal(err)
	}
	if got.OnDependencyFailure != "run" || len(got.DependencyResults) != 2 || got.DependencyResults[0].ID != "a" || got.DependencyResults[1].Status != "aborted" {
		t.Fatalf("get -o json: %+v", got)
	}

	// r awaits a child at run time, then runs again with its result.
	ref := claim("report")
	if _, err := c.Await(ctx, ref, norn.AwaitRequest{Tasks: []norn.NewTask{{ID: "kid", Queue: "kids"}}}); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "r awaiting", s.ok(t, "get", "r"), "blocked", "depends_on:", "a, b, kid", "2 of 3 ended",
		"TaskAwait", "waits for the children it submitted")
	mustContain(t, "kid's dependents", s.ok(t, "get", "kid"), "dependents:", "1 (r)")
	if err := c.Complete(ctx, claim("kids"), json.RawMessage(`"done"`)); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "r after the child", s.ok(t, "get", "r"), "ready", "3 of 3 ended", `kid`, `completed "done"`)
}
