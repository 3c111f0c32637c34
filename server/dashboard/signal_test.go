package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// TestTaskSignals: a task snoozed until a signal shows its wait; the page
// sends the signal, and the task turns ready with the signal listed (its
// data as text) and the wait received.
func TestTaskSignals(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	if _, err := e.st.Submit(ctx, norn.NewTask{ID: "pay", Queue: "payouts"}); err != nil {
		t.Fatal(err)
	}
	w, err := e.st.RegisterWorker(ctx, norn.WorkerInfo{Name: "w", Queues: []string{"payouts"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.st.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"payouts"}, N: 1})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	ref := norn.LeaseRef{TaskID: "pay", Worker: w, Lease: got[0].Lease}
	if _, err := e.st.Snooze(ctx, ref, norn.Snooze{UntilSignal: "approval", Timeout: norn.Duration(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	e.open("#/tasks/pay")
	e.wait(`/Waits for the signal/.test((document.querySelector("#signal-wait") || {}).textContent || "")`)
	if got := e.text("#signal-wait"); !strings.Contains(got, "approval") {
		t.Errorf("wait shown as %q", got)
	}
	if got := e.text("#signals"); !strings.Contains(got, "No signals") {
		t.Errorf("signals before any = %q", got)
	}
	e.eval(`document.querySelector("#signal-name").value = "approval"; document.querySelector("#signal-data").value = '{"by":"<b>ada</b>"}'`)
	e.click("#signal-send")
	e.wait(`document.querySelector('#task-status [data-status="ready"]') && /Received/.test(document.querySelector("#signal-wait").textContent)`)
	if got := e.text("#signals"); !strings.Contains(got, "approval") || !strings.Contains(got, "<b>ada</b>") {
		t.Errorf("signals after sending = %q", got)
	}
	if evalAs[bool](e, `!!document.querySelector("#signals b")`) {
		t.Error("markup in a signal's data became an element")
	}
	// A bad signal is refused with a message and changes nothing.
	e.eval(`document.querySelector("#signal-name").value = "x"; document.querySelector("#signal-data").value = "{bad"`)
	e.click("#signal-send")
	e.wait(`/must be JSON/.test(document.body.textContent)`)
	task, err := e.st.Get(ctx, "pay")
	if err != nil || len(task.Signals) != 1 {
		t.Fatalf("signals stored: %+v %v", task, err)
	}
}
