package dashboard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// TestBatchPages: the batch list with its state filter, a batch's page
// (counts, progress, callbacks, members, seal) following its members live,
// and the link from a member's task page.
func TestBatchPages(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	members := []norn.NewTask{{ID: "thumb-1", Queue: "thumbs"}, {ID: "thumb-2", Queue: "thumbs"}, {ID: "thumb-3", Queue: "thumbs"}, {ID: "resize-1", Queue: "resize"}}
	if _, err := e.st.CreateBatch(ctx, norn.NewBatch{ID: "import-7", Labels: map[string]string{"team": "data", "note": "<b>bold</b>"},
		OnComplete: &norn.NewTask{Queue: "reports", Spec: json.RawMessage(`{"import":7}`)},
		OnSuccess:  &norn.NewTask{Queue: "notify"}, Tasks: members}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.CreateBatch(ctx, norn.NewBatch{ID: "nightly", Seal: true, OnComplete: &norn.NewTask{Queue: "reports"}}); err != nil {
		t.Fatal(err)
	}

	e.open("#/")
	e.click("#nav-batches")
	row := func(id string) string { return fmt.Sprintf(`tr[data-batch=%q]`, id) }
	e.wait(fmt.Sprintf(`document.querySelector('%s') && document.querySelector('%s')`, row("import-7"), row("nightly")))
	if got := e.text(row("import-7") + " td.state"); got != "open" {
		t.Errorf("import-7 state = %q, want open", got)
	}
	if got := e.text(row("import-7") + " td.members"); got != " 0 / 4 ended" {
		t.Errorf("import-7 members = %q", got)
	}
	// Labels are text: markup in one is shown, not made.
	if got := evalAs[bool](e, fmt.Sprintf(`!!document.querySelector('%s b')`, row("import-7"))); got {
		t.Error("a label's markup became an element")
	}
	// A batch created sealed without members is done once the store fires it.
	e.click(`#state-chips button[data-state="done"]`)
	e.wait(fmt.Sprintf(`document.querySelector('%s td.state') && document.querySelector('%s td.state').textContent === "done" && !document.querySelector('%s')`,
		row("nightly"), row("nightly"), row("import-7")))
	if got := evalAs[string](e, `location.hash`); got != "#/batches?state=done" {
		t.Errorf("the state filter is not in the URL: %s", got)
	}
	e.click(`#state-chips button[data-state="open"]`)
	e.wait(fmt.Sprintf(`document.querySelector('%s') && !document.querySelector('%s')`, row("import-7"), row("nightly")))
	e.shots("batches", fmt.Sprintf(`document.querySelector('%s')`, row("import-7")))

	// The batch page: counts, callbacks not yet submitted, every member.
	e.click(row("import-7") + " td.name a")
	e.wait(`(document.querySelector("#batch-state") || {}).textContent === "open" && document.querySelectorAll("#task-list tr[data-id]").length === 4`)
	if got := e.text(`#batch-counts [data-status="ready"] .v`); got != "4" {
		t.Errorf("ready members = %q, want 4", got)
	}
	if got := e.text(`#task-list tr[data-id="resize-1"] td.queue`); got != "resize" {
		t.Errorf("member queue = %q, want resize", got)
	}
	if got := e.text(`[data-callback="complete"] .cb-task`); got != "Submitted once the batch is sealed and every member ended." {
		t.Errorf("complete callback = %q", got)
	}

	// Seal from the page, then the members end: the page follows.
	e.click("#seal")
	e.wait(`document.querySelector("#batch-state").textContent === "sealed" && !document.querySelector("#seal")`)
	if b, err := e.st.GetBatch(ctx, "import-7"); err != nil || b.State != norn.BatchSealed {
		t.Fatalf("after seal: %+v, %v", b, err)
	}
	w, err := e.st.RegisterWorker(ctx, norn.WorkerInfo{Name: "w", Queues: []string{"thumbs"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.st.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"thumbs"}, N: 2, Timeout: norn.Duration(time.Hour)})
	if err != nil || len(got) != 2 {
		t.Fatalf("claim: %v, %v", got, err)
	}
	for _, tk := range got {
		if err := e.st.Complete(ctx, norn.LeaseRef{TaskID: tk.ID, Worker: w, Lease: tk.Lease}, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.wait(`/2 \/ 4 ended/.test(document.querySelector("#batch-progress").textContent)`)
	for _, id := range []string{"thumb-3", "resize-1"} {
		if _, err := e.st.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	complete := norn.BatchCallbackID("import-7", norn.CallbackComplete)
	e.wait(fmt.Sprintf(`document.querySelector("#batch-state").textContent === "done" && (document.querySelector('[data-callback="complete"] .cb-task a') || {}).textContent === %q`, complete))
	if got := e.text("#batch-progress"); got != " 4 / 4 ended" {
		t.Errorf("progress = %q", got)
	}
	if got := e.text(`[data-callback="success"] .cb-task`); got != "Not submitted: not every member completed." {
		t.Errorf("success callback = %q", got)
	}
	if got := evalAs[float64](e, `document.querySelector("#batch-progress .progress").getAttribute("aria-valuenow") - 0`); got != 100 {
		t.Errorf("progress bar at %v%%, want 100", got)
	}
	// The members' status filter.
	e.click(`#status-chips button[data-status="cancelled"]`)
	e.wait(`document.querySelectorAll("#task-list tr[data-id]").length === 2 && document.querySelector('#task-list tr[data-id="resize-1"]')`)
	e.shots("batch", `document.querySelector('[data-callback="complete"] .cb-task a')`)

	// The callback's link opens its task; a member's page links back.
	e.click(`[data-callback="complete"] .cb-task a`)
	e.wait(fmt.Sprintf(`decodeURIComponent(location.hash) === %q && (document.querySelector(".task-id") || {}).textContent === %q`, "#/tasks/"+complete, complete))
	e.goHash("#/tasks/thumb-3")
	e.wait(`(document.querySelector("#batch a") || {}).textContent === "import-7"`)
	e.click("#batch a")
	e.wait(`location.hash === "#/batches/import-7" && document.querySelector("#batch-state")`)

	// A deleted batch says so.
	if _, err := e.st.DeleteBatch(ctx, "import-7", false); err != nil {
		t.Fatal(err)
	}
	e.open("#/batches/import-7")
	e.wait(`document.querySelector("#batch-gone")`)
}
