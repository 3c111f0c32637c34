package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"
)

// TestBatchCommands: norn batch and the batch filters against a real
// server process, through the OpenAPI-checking proxy.
func TestBatchCommands(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir())
	type batch struct {
		ID           string
		State        string
		Total        int
		Counts       map[string]int
		Labels       map[string]string
		SuccessTask  string `json:"success_task"`
		CompleteTask string `json:"complete_task"`
	}

	// create from flags; members join at submit, one by one and from NDJSON.
	b := decode[struct{ Batch batch }](t, s.ok(t, "batch", "create", "--id", "b1", "--label", "team=data",
		"--on-complete-queue", "reports", "--on-complete-spec", `{"import":1}`, "--on-success-queue", "notify", "-o", "json")).Batch
	if b.ID != "b1" || b.State != "open" || b.Labels["team"] != "data" {
		t.Fatalf("batch create: %+v", b)
	}
	s.fails(t, 1, `batch "b1" exists`, "batch", "create", "--id", "b1")
	mustContain(t, "member", s.ok(t, "submit", "work", `{"i":1}`, "--id", "m1", "--in-batch", "b1"), "m1 submitted to work")
	nd := filepath.Join(t.TempDir(), "members.ndjson")
	os.WriteFile(nd, []byte(`{"id":"m2"}`+"\n"+`{"id":"m3","batch":"b1"}`+"\n"), 0o644)
	mustContain(t, "ndjson members", s.ok(t, "submit", "work", "--batch", nd, "--in-batch", "b1"), "submitted 2 tasks")
	s.fails(t, 1, "not found", "submit", "work", "--in-batch", "nope")
	mustContain(t, "get shows the batch", s.ok(t, "get", "m2"), "batch:", "b1")

	// the --batch filter of list and count; batch list, get.
	if got := decode[[]task](t, s.ok(t, "list", "--batch", "b1", "-o", "json")); len(got) != 3 {
		t.Fatalf("list --batch b1: %+v", got)
	}
	if got := strings.TrimSpace(s.ok(t, "count", "--batch", "b1")); got != "3" {
		t.Fatalf("count --batch b1 = %q", got)
	}
	mustContain(t, "batch list", s.ok(t, "batch", "list"), "BATCH", "b1", "open", "0/3", "complete, success", "team=data")
	if r := s.norn(t, "", "batch", "list", "--state", "sealed"); r.code != 0 || !strings.Contains(r.err, "(no batches)") {
		t.Fatalf("batch list --state sealed: %+v", r)
	}
	if got := decode[[]batch](t, s.ok(t, "batch", "--label", "team=data", "-o", "json")); len(got) != 1 || got[0].Total != 3 {
		t.Fatalf("batch --label team=data: %+v", got)
	}
	mustContain(t, "batch get", s.ok(t, "batch", "get", "b1"), "state:", "open", "members:", "3, 0 ended (0%)", "ready 3",
		"on_complete:", `queue reports, spec {"import":1}; not submitted`)

	// seal; then the members complete and both callbacks are submitted.
	mustContain(t, "seal", s.ok(t, "batch", "seal", "b1"), "batch b1 sealed (0 of 3 members ended)")
	s.fails(t, 1, `--in-batch: batch "b1" is sealed`, "submit", "work", "--in-batch", "b1")
	completeAll(t, s, "work", 3)
	// The store fires a batch's callbacks soon after its last member ends,
	// not in the same call: wait for it.
	b = awaitDone[batch](t, s, "b1")
	if b.State != "done" || b.CompleteTask != "norn:batch:b1:complete" || b.SuccessTask != "norn:batch:b1:success" || b.Counts["completed"] != 3 {
		t.Fatalf("batch after its members completed: %+v", b)
	}
	mustContain(t, "complete callback", s.ok(t, "get", b.CompleteTask), "reports", "norn.batch=b1", "norn.completed=3")
	mustContain(t, "get of a done batch", s.ok(t, "batch", "get", "b1"), "final:", "completed 3", "submitted as norn:batch:b1:success")
	mustContain(t, "seal again", s.ok(t, "batch", "seal", "b1"), "batch b1 sealed and done")

	// --file with members, and the filters of cancel, retry and delete.
	spec := filepath.Join(t.TempDir(), "batch.json")
	os.WriteFile(spec, []byte(`{"id":"b2","on_success":{"queue":"notify","priority":3},"seal":true,
		"tasks":[{"id":"n1","queue":"later","delay":"1h"},{"id":"n2","queue":"later","delay":"1h"}]}`), 0o644)
	mustContain(t, "create --file", s.ok(t, "batch", "create", "-f", spec), "batch b2 created (sealed) with 2 tasks (0 duplicates)")
	mustContain(t, "cancel dry run", s.ok(t, "cancel", "--batch", "b2", "--dry-run"), "would cancel 2 tasks")
	mustContain(t, "cancel", s.ok(t, "cancel", "--batch", "b2", "--yes"), "cancelled 2 tasks")
	b = awaitDone[batch](t, s, "b2")
	if b.State != "done" || b.SuccessTask != "" || b.CompleteTask != "" {
		t.Fatalf("a done batch of cancelled members without on_complete: %+v", b)
	}
	mustContain(t, "retry dry run", s.ok(t, "retry", "--batch", "b2", "--dry-run"), "would retry 2 tasks")
	s.fails(t, 2, "this would delete 2 tasks: give --yes", "batch", "delete", "b2", "--members")
	mustContain(t, "delete dry run", s.ok(t, "batch", "delete", "b2", "--members", "--dry-run"), "would delete batch b2 and 2 tasks")
	mustContain(t, "delete with members", s.ok(t, "batch", "delete", "b2", "--members", "--yes"), "batch b2 deleted with 2 tasks")
	s.fails(t, 1, "not found", "batch", "get", "b2")
	s.fails(t, 1, "not found", "get", "n1")
	mustContain(t, "delete without members", s.ok(t, "batch", "delete", "b1"), "batch b1 deleted (its members stay)")
	mustContain(t, "members stay", s.ok(t, "delete", "--batch", "b1", "--yes"), "deleted 3 tasks")

	// Bad input is a usage error naming the flag, before anything is sent.
	s.fails(t, 2, "--on-success-spec needs --on-success-queue", "batch", "create", "--on-success-spec", "{}")
	s.fails(t, 2, "--on-complete-spec is not valid JSON", "batch", "create", "--on-complete-queue", "q", "--on-complete-spec", "{")
	s.fails(t, 2, "--on-complete-queue", "batch", "create", "--on-complete-queue", "bad q")
	s.fails(t, 2, "not both", "batch", "create", "-f", spec, "--seal")
	s.fails(t, 2, "--state", "batch", "list", "--state", "closed")
	s.fails(t, 2, "--batch", "list", "--batch", "a b")
	s.fails(t, 2, "--in-batch", "submit", "work", "--in-batch", "a b")
	s.fails(t, 2, "go with --members", "batch", "delete", "b1", "--yes")
}

// awaitDone reads batch id until it is done.
func awaitDone[B any](t *testing.T, s *server, id string) B {
	t.Helper()
	var out string
	await.Until(t, 20*time.Second, "batch "+id+" to be done", func() bool {
		out = s.ok(t, "batch", "get", id, "-o", "json")
		return decode[struct{ State string }](t, out).State == "done"
	})
	return decode[B](t, out)
}

// completeAll claims n tasks of queue over HTTP and completes each.
func completeAll(t *testing.T, s *server, queue string, n int) {
	t.Helper()
	call := func(path, body string) map[string]any {
		t.Helper()
		resp, err := http.Post(s.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode/100 != 2 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return decode[map[string]any](t, string(b))
	}
	w := call("/v1/workers", `{"name":"e2e"}`)["id"].(string)
	tasks := call("/v1/queues/"+queue+"/claim", fmt.Sprintf(`{"worker":%q,"n":%d,"timeout":"30s"}`, w, n))["tasks"].([]any)
	if len(tasks) != n {
		t.Fatalf("claimed %d tasks of %s, want %d", len(tasks), queue, n)
	}
	for _, x := range tasks {
		tk := x.(map[string]any)
		call("/v1/tasks/"+tk["id"].(string)+"/complete", fmt.Sprintf(`{"worker":%q,"lease":%d}`, w, int(tk["lease"].(float64))))
	}
}
