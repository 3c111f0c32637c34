package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
)

// TestSubmitDebounce: submit --on-duplicate replace and --debounce-max, the
// output of a replace and of a successor, the batch count, get showing
// TaskReplace, and the flags' refusals, against a real server process
// through the OpenAPI-checking proxy.
func TestSubmitDebounce(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir())
	ctx := context.Background()
	c, err := client.New(s.url)
	if err != nil {
		t.Fatal(err)
	}

	mustContain(t, "first", s.ok(t, "submit", "index", `{"v":1}`, "--id", "h", "--unique-key", "doc-7", "--delay", "2s"),
		"h submitted to index (scheduled)")
	mustContain(t, "replace", s.ok(t, "submit", "index", `{"v":2}`, "--unique-key", "doc-7", "--on-duplicate", "replace",
		"--delay", "1h", "--debounce-max", "1m", "--priority", "4"),
		`h replaced: it holds unique key "doc-7" and had not started`, "status scheduled, version 2")
	h, err := c.Get(ctx, "h")
	if err != nil {
		t.Fatal(err)
	}
	if got := h.RunAt.Sub(h.Created); got != time.Minute || h.Priority != 4 || string(h.Spec) != `{"v":2}` {
		t.Fatalf("replaced h: run_at %v after created (want 1m, the cap), priority %d, spec %s", got, h.Priority, h.Spec)
	}
	mustContain(t, "get", s.ok(t, "get", "h"), "TaskReplace (a submit with on_duplicate replace gave it a new spec", `{"v":2}`)
	dup := decode[struct {
		Task      task
		Duplicate bool
		Replaced  bool
	}](t, s.ok(t, "submit", "index", `{"v":3}`, "--unique-key", "doc-7", "--on-duplicate", "replace", "-o", "json"))
	if !dup.Duplicate || !dup.Replaced || dup.Task.ID != "h" || compact(dup.Task.Spec) != `{"v":3}` {
		t.Fatalf("submit -o json of a replace: %+v", dup)
	}
	mustContain(t, "keep", s.ok(t, "submit", "index", `{"v":4}`, "--unique-key", "doc-7", "--on-duplicate", "keep"),
		`h holds unique key "doc-7"`, "nothing submitted")

	// A holder that has started gets a successor; the next replace updates it.
	s.ok(t, "submit", "busy", "--id", "r", "--unique-key", "k")
	w, err := c.RegisterWorker(ctx, norn.WorkerInfo{Name: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	if ts, err := c.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"busy"}, N: 1}); err != nil || len(ts) != 1 {
		t.Fatalf("claim: %v, %v", ts, err)
	}
	mustContain(t, "successor", s.ok(t, "submit", "busy", `{"v":2}`, "--id", "next", "--unique-key", "k", "--on-duplicate", "replace"),
		"next submitted to busy (blocked)", `the successor of r, which holds unique key "k" and has started`)
	mustContain(t, "successor replaced", s.ok(t, "submit", "busy", `{"v":3}`, "--unique-key", "k", "--on-duplicate", "replace"),
		"next replaced")
	mustContain(t, "plain", s.ok(t, "submit", "busy", "--id", "plain", "--depends-on", "r"), "plain submitted to busy (blocked)\n")
	if out := s.ok(t, "submit", "busy", "--id", "plain", "--depends-on", "r"); len(out) == 0 || strings.Contains(out, "successor") {
		t.Fatalf("a duplicate id reported as a successor: %q", out)
	}

	r := s.norn(t, `{"queue":"index","unique_key":"doc-7","on_duplicate":"replace","spec":5}`+"\n"+`{"queue":"index"}`+"\n",
		"submit", "--batch", "-")
	if r.code != 0 {
		t.Fatalf("submit --batch: exit %d: %s", r.code, r.err)
	}
	mustContain(t, "batch", r.out, "submitted 2 tasks (1 duplicates, 1 of them replaced)")

	s.fails(t, 2, "--on-duplicate must be keep or replace", "submit", "index", "--unique-key", "k", "--on-duplicate", "merge")
	s.fails(t, 2, "--on-duplicate replace needs --unique-key", "submit", "index", "--on-duplicate", "replace")
	s.fails(t, 2, "--debounce-max needs --on-duplicate replace", "submit", "index", "--unique-key", "k", "--debounce-max", "1m")
	s.fails(t, 2, "negative", "submit", "index", "--unique-key", "k", "--on-duplicate", "replace", "--debounce-max", "-1s")
	s.fails(t, 2, "do not go together", "submit", "index", "--unique-key", "k", "--on-duplicate", "replace", "--sequence-key", "s")
	s.fails(t, 2, "--batch cannot be combined", "submit", "--batch", "-", "--on-duplicate", "replace")
}
