package e2e

import (
	"context"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
)

// TestSequenceCommands: submit --sequence-key, queues set
// --sequence-on-failure, norn sequence (text and JSON) and get showing the
// key, against a real server process through the OpenAPI-checking proxy.
func TestSequenceCommands(t *testing.T) {
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
	claim := func(queue string) norn.LeaseRef {
		t.Helper()
		ts, err := c.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{queue}, N: 10})
		if err != nil || len(ts) != 1 {
			t.Fatalf("claim %s: %v, %v", queue, ts, err)
		}
		return norn.LeaseRef{TaskID: ts[0].ID, Worker: w, Lease: ts[0].Lease}
	}

	s.ok(t, "submit", "ledger", `{"op":"open"}`, "--id", "h", "--sequence-key", "acct 7")
	s.ok(t, "submit", "ledger", `{"op":"deposit"}`, "--id", "n", "--sequence-key", "acct 7", "--priority", "9")
	s.ok(t, "submit", "ledger", `{"op":"close"}`, "--id", "x", "--sequence-key", "acct 7")
	s.ok(t, "cancel", "x")
	mustContain(t, "get h", s.ok(t, "get", "h"), "sequence_key:", "acct 7 (norn sequence ledger 'acct 7')")
	mustContain(t, "get n", s.ok(t, "get", "n"), "status:", "blocked")
	mustContain(t, "sequence", s.ok(t, "sequence", "ledger", "acct 7"), "head:", "h (ready)", "halted:", "no", "waiting:", "1")

	// The head goes first though the waiting member's priority is higher.
	if ref := claim("ledger"); ref.TaskID != "h" {
		t.Fatalf("claimed %s first, want h", ref.TaskID)
	} else if err := c.Abort(ctx, ref, norn.ErrorInfo{Code: "broken"}); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "halted", s.ok(t, "sequence", "ledger", "acct 7"), "h (aborted)", "halted:", "yes", "norn retry h", "norn delete h")
	got := decode[norn.SequenceInfo](t, s.ok(t, "sequence", "ledger", "acct 7", "-o", "json"))
	if want := (norn.SequenceInfo{Queue: "ledger", Key: "acct 7", Head: "h", HeadStatus: norn.StatusAborted, Halted: true, Waiting: 1}); got != want {
		t.Fatalf("sequence -o json = %+v, want %+v", got, want)
	}
	// A retry of another member would let it run beside the head.
	s.fails(t, 1, `whose head is "h"`, "retry", "x")
	mustContain(t, "halted list", s.ok(t, "sequence", "ledger", "--halted"), "KEY", "acct 7", "h", "aborted", "yes")
	s.ok(t, "retry", "h")
	if err := c.Complete(ctx, claim("ledger"), nil); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "moved on", s.ok(t, "sequence", "ledger", "acct 7"), "n (ready)", "waiting:", "0")
	mustContain(t, "unused", s.ok(t, "sequence", "ledger", "nobody"), "head:", "none")

	s.fails(t, 2, "do not go together", "submit", "ledger", "--sequence-key", "k", "--depends-on", "h")
	s.fails(t, 2, "--sequence-key", "submit", "ledger", "--sequence-key", "bad\x01key")
	s.fails(t, 2, "--batch cannot be combined with --sequence-key", "submit", "--batch", "-", "--sequence-key", "k")
	s.fails(t, 2, "give QUEUE alone", "sequence", "ledger", "k", "--halted")
	mustContain(t, "nothing halted", s.ok(t, "sequence", "ledger", "--halted"), "no sequence with a head")

	mustContain(t, "queues set", s.ok(t, "queues", "set", "cq", "--sequence-on-failure", "continue"), "sequence_on_failure:", "continue")
	s.fails(t, 2, "--sequence-on-failure must be halt or continue", "queues", "set", "cq", "--sequence-on-failure", "skip")
	s.ok(t, "submit", "cq", "--id", "c1", "--sequence-key", "k")
	s.ok(t, "submit", "cq", "--id", "c2", "--sequence-key", "k")
	if err := c.Abort(ctx, claim("cq"), norn.ErrorInfo{Code: "broken"}); err != nil {
		t.Fatal(err)
	}
	mustContain(t, "continued", s.ok(t, "sequence", "cq", "k"), "c2 (ready)", "halted:", "no")
	mustContain(t, "queues get", s.ok(t, "queues", "set", "cq", "--sequence-on-failure", "halt"), "sequence_on_failure:", "halt")
}
