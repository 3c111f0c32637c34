package dashboard_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// TestSequencePage: a task's page links its sequence key to the sequence's
// page, which shows the head with its status and the waiting count, says
// how to go on once an aborted head halts it, and follows the sequence live.
func TestSequencePage(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	// A key with a slash and markup: one path segment, shown as text.
	const key = "acct/<b>7</b>"
	for _, nt := range []norn.NewTask{{ID: "open-7", Queue: "ledger", SequenceKey: key}, {ID: "deposit-7", Queue: "ledger", SequenceKey: key, Priority: 9},
		{ID: "close-7", Queue: "ledger", SequenceKey: key}} {
		if _, err := e.st.Submit(ctx, nt); err != nil {
			t.Fatal(err)
		}
	}

	e.open("#/tasks/deposit-7")
	e.wait(fmt.Sprintf(`(document.querySelector("#sequence-key") || {}).textContent === %q`, key))
	e.click("#sequence-key a")
	e.wait(`(document.querySelector("#sequence-head a") || {}).textContent === "open-7"`)
	if got := e.text(`#sequence-head [data-status]`); got != "ready" {
		t.Errorf("head status = %q, want ready", got)
	}
	if got := e.text("#sequence-waiting"); got != "2" {
		t.Errorf("waiting = %q, want 2", got)
	}
	if got := evalAs[bool](e, `!document.querySelector("#sequence-halted").hidden || !!document.querySelector("#sequence-fields b")`); got {
		t.Error("a running sequence shows as halted, or the key's markup became an element")
	}

	// The head ends aborted: the page follows and says how to go on.
	w, err := e.st.RegisterWorker(ctx, norn.WorkerInfo{Name: "w", Queues: []string{"ledger"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.st.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"ledger"}, N: 3, Timeout: norn.Duration(time.Hour)})
	if err != nil || len(got) != 1 || got[0].ID != "open-7" {
		t.Fatalf("claim: %v, %v", got, err)
	}
	if err := e.st.Abort(ctx, norn.LeaseRef{TaskID: "open-7", Worker: w, Lease: got[0].Lease}, norn.ErrorInfo{Code: "broken"}); err != nil {
		t.Fatal(err)
	}
	e.wait(`!document.querySelector("#sequence-halted").hidden && document.querySelector("#sequence-halted-field").textContent === "yes"`)
	note := e.text("#sequence-halted")
	for _, w := range []string{"Halted", "2 waiting tasks", "retry it", "delete it"} {
		if !strings.Contains(note, w) {
			t.Errorf("halted note %q lacks %q", note, w)
		}
	}
	if got := e.text(`#sequence-head [data-status]`); got != "aborted" {
		t.Errorf("head status = %q, want aborted", got)
	}
	e.shots("sequence", `!document.querySelector("#sequence-halted").hidden`)

	// The queue's page lists it among its halted sequences.
	e.open("#/queues/ledger")
	e.wait(`!(document.querySelector("#halted-sequences") || { hidden: true }).hidden`)
	if got := e.text("#halted-sequences li"); !strings.Contains(got, key) || !strings.Contains(got, "open-7") || !strings.Contains(got, "2 waiting") {
		t.Errorf("halted sequences card %q, want the key, its head and 2 waiting", got)
	}
	if got := evalAs[bool](e, `!!document.querySelector("#halted-sequences b")`); got {
		t.Error("the key's markup became an element on the queue page")
	}
	e.click("#halted-sequences li a")
	e.wait(`(document.querySelector("#sequence-head a") || {}).textContent === "open-7"`)

	// Deleting the head moves the sequence on; the page follows.
	if err := e.st.Delete(ctx, "open-7"); err != nil {
		t.Fatal(err)
	}
	e.wait(`(document.querySelector("#sequence-head a") || {}).textContent === "deposit-7" && document.querySelector("#sequence-halted").hidden`)
	if got := e.text("#sequence-waiting"); got != "1" {
		t.Errorf("waiting = %q, want 1", got)
	}
	e.click("#sequence-head a")
	e.wait(`location.hash === "#/tasks/deposit-7"`)
}
