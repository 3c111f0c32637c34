package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// TestTaskWorkflow: the task page's workflow section shows the
// on_dependency_failure policy, each dependency's current status (a
// deleted one from its recorded result) and recorded outcome, the children
// an await added, the dependents, and the graph; it follows a child ending.
func TestTaskWorkflow(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	for _, nt := range []norn.NewTask{
		{ID: "fetch-a", Queue: "fetch"},
		{ID: "fetch-b", Queue: "fetch"},
		{ID: "report", Queue: "report", DependsOn: []string{"fetch-a", "fetch-b"}, OnDependencyFailure: norn.DependencyRun},
		{ID: "strict", Queue: "report", DependsOn: []string{"fetch-b"}},
	} {
		if _, err := e.st.Submit(ctx, nt); err != nil {
			t.Fatal(err)
		}
	}
	w, err := e.st.RegisterWorker(ctx, norn.WorkerInfo{Name: "w", Queues: []string{"fetch", "report", "kids"}})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(queue string) norn.LeaseRef {
		t.Helper()
		got, err := e.st.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{queue}, N: 1, Timeout: norn.Duration(time.Hour)})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim %s: %v, %v", queue, got, err)
		}
		return norn.LeaseRef{TaskID: got[0].ID, Worker: w, Lease: got[0].Lease}
	}
	if err := e.st.Complete(ctx, claim("fetch"), json.RawMessage(`{"rows":7}`)); err != nil {
		t.Fatal(err)
	}
	if err := e.st.Abort(ctx, claim("fetch"), norn.ErrorInfo{Code: "upstream_down", Description: "<b>503</b> from the source"}); err != nil {
		t.Fatal(err)
	}
	// fetch-a goes away; report keeps what it recorded of it.
	if err := e.st.Delete(ctx, "fetch-a"); err != nil {
		t.Fatal(err)
	}
	aw, ok := e.st.(norn.Awaiter)
	if !ok {
		t.Fatal("the embedded store does not await")
	}
	if _, err := aw.Await(ctx, claim("report"), norn.AwaitRequest{Tasks: []norn.NewTask{{ID: "kid", Queue: "kids"}}, OnChildFailure: norn.ChildFailureContinue}); err != nil {
		t.Fatal(err)
	}

	li := func(id string) string { return fmt.Sprintf(`#depends-on li[data-id=%q]`, id) }
	e.open("#/tasks/report")
	e.wait(`(document.querySelector("#deps-title") || {}).textContent === "Dependencies and children" && document.querySelector('` + li("kid") + ` .dep-status [data-status="ready"]')`)
	if got := e.text("#dep-policy"); !strings.Contains(got, "run") || !strings.Contains(got, "whatever the outcome") {
		t.Errorf("policy shown as %q", got)
	}
	if got := e.text("#await-note"); !strings.Contains(got, "awaited children once") || !strings.Contains(got, "on_child_failure") {
		t.Errorf("await note = %q", got)
	}
	// The child is told from the dependencies the task was submitted with.
	e.wait(`document.querySelector('` + li("kid") + ` [data-child]')`)
	if evalAs[bool](e, `!!document.querySelector('`+li("fetch-b")+` [data-child]')`) {
		t.Error("a submitted dependency is marked as a child")
	}
	e.wait(`document.querySelector('` + li("fetch-a") + ` [data-gone]')`)
	if got := e.text(li("fetch-a")); !strings.Contains(got, "no longer stored") || !strings.Contains(got, `{"rows":7}`) {
		t.Errorf("deleted dependency shown as %q, want its recorded result", got)
	}
	if got := evalAs[bool](e, `!!document.querySelector('`+li("fetch-a")+` a')`); got {
		t.Error("a deleted dependency is still a link")
	}
	e.wait(`document.querySelector('` + li("fetch-b") + ` .dep-status [data-status="aborted"]')`)
	if got := e.text(li("fetch-b") + " .dep-outcome"); !strings.Contains(got, "aborted") || !strings.Contains(got, "upstream_down") || !strings.Contains(got, "<b>503</b>") {
		t.Errorf("fetch-b outcome = %q", got)
	}
	if got := evalAs[bool](e, `!!document.querySelector('#workflow b b, .dep-error b')`); got {
		t.Error("markup in an error became an element")
	}
	if got := e.text(li("kid") + " .dep-outcome"); !strings.Contains(got, "not ended") {
		t.Errorf("kid outcome = %q, want not ended", got)
	}
	if got := e.text(`#history li[data-type="TaskAwait"]`); !strings.Contains(got, "Awaits its children") {
		t.Errorf("await history entry = %q", got)
	}
	e.wait(`document.querySelector("#dependents-status") && /No task depends/.test(document.querySelector("#dependents-status").textContent)`)
	// The graph: three dependencies, then the task; no dependents.
	if got := evalAs[string](e, `[...document.querySelectorAll('#wf-graph [data-side="deps"] .wf-node')].map(n => n.dataset.id).join(",")`); got != "fetch-a,fetch-b,kid" {
		t.Errorf("graph dependencies = %q", got)
	}
	if got := evalAs[string](e, `document.querySelector('#wf-graph .wf-node.self').dataset.id`); got != "report" {
		t.Errorf("graph task = %q", got)
	}
	e.shots("workflow", `document.querySelector('#wf-graph .wf-node.self')`)

	// The child ends: the page follows the task and shows its result.
	if err := e.st.Complete(ctx, claim("kids"), json.RawMessage(`"done"`)); err != nil {
		t.Fatal(err)
	}
	e.wait(`document.querySelector('` + li("kid") + ` .dep-outcome[data-outcome="completed"]') && document.querySelector('#task-status [data-status="ready"]')`)
	if got := e.text(li("kid")); !strings.Contains(got, `"done"`) {
		t.Errorf("kid after it completed = %q", got)
	}

	// A dependency's page lists its dependents (and draws them), and a
	// task submitted with the default policy says abort.
	e.goHash("#/tasks/fetch-b")
	e.wait(`document.querySelector('#dependents-list li[data-id="report"]') && document.querySelector('#dependents-list li[data-id="strict"]')`)
	if got := evalAs[float64](e, `document.querySelectorAll('#wf-graph [data-side="dependents"] .wf-node').length`); got != 2 {
		t.Errorf("graph dependents = %v, want 2", got)
	}
	if got := evalAs[bool](e, `document.querySelector("#dep-policy").hidden`); !got {
		t.Error("a task without dependencies shows a dependency policy")
	}
	e.goHash("#/tasks/strict")
	e.wait(`/abort \(the default\)/.test((document.querySelector("#dep-policy") || {}).textContent) && document.querySelector('#task-status [data-status="aborted"]')`)
	if got := e.text("#deps-title"); got != "Dependencies" {
		t.Errorf("title without awaits = %q", got)
	}
}
