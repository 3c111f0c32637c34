package embedded_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/embedded"
)

// The embedded store runs inside a Go program: open a data directory,
// submit, claim and complete, with no server.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "norn-example-")
	defer os.RemoveAll(dir)
	s, err := embedded.Open(ctx, embedded.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer s.Close()

	sub, _ := s.Submit(ctx, norn.NewTask{ID: "welcome-ada", Queue: "emails", Spec: json.RawMessage(`{"to":"ada@example.com"}`)})
	fmt.Println(sub[0].Task.ID, sub[0].Task.Status)

	tasks, _ := s.Claim(ctx, norn.ClaimRequest{Worker: "w1", Queues: []string{"emails"}})
	t := tasks[0]
	fmt.Println("claimed", t.ID, "lease", t.Lease)

	_ = s.Complete(ctx, norn.LeaseRef{TaskID: t.ID, Worker: "w1", Lease: t.Lease}, json.RawMessage(`{"sent":true}`))
	done, _ := s.Get(ctx, "welcome-ada")
	fmt.Println(done.Status, string(done.Result))
	// Output:
	// welcome-ada ready
	// claimed welcome-ada lease 1
	// completed {"sent":true}
}

// A unique key makes a submit idempotent: a second submit with the same
// key returns the task already there instead of a new one.
func ExampleStore_Submit_uniqueKey() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "norn-example-")
	defer os.RemoveAll(dir)
	s, _ := embedded.Open(ctx, embedded.Options{Dir: dir})
	defer s.Close()

	first, _ := s.Submit(ctx, norn.NewTask{Queue: "invoices", UniqueKey: "invoice-2026-11", ID: "inv-1"})
	again, _ := s.Submit(ctx, norn.NewTask{Queue: "invoices", UniqueKey: "invoice-2026-11", ID: "inv-2"})
	fmt.Println(first[0].Task.ID, again[0].Task.ID, again[0].Duplicate)
	// Output: inv-1 inv-1 true
}

// Dependencies hold a task blocked until the tasks it depends on complete.
func ExampleStore_Submit_dependencies() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "norn-example-")
	defer os.RemoveAll(dir)
	s, _ := embedded.Open(ctx, embedded.Options{Dir: dir})
	defer s.Close()

	_, _ = s.Submit(ctx,
		norn.NewTask{ID: "extract", Queue: "etl"},
		norn.NewTask{ID: "load", Queue: "etl", DependsOn: []string{"extract"}},
	)
	load, _ := s.Get(ctx, "load")
	fmt.Println("load is", load.Status)

	t, _ := s.Claim(ctx, norn.ClaimRequest{Worker: "w1", Queues: []string{"etl"}})
	_ = s.Complete(ctx, norn.LeaseRef{TaskID: t[0].ID, Worker: "w1", Lease: t[0].Lease}, nil)
	load, _ = s.Get(ctx, "load")
	fmt.Println("after", t[0].ID, "completed, load is", load.Status)
	// Output:
	// load is blocked
	// after extract completed, load is ready
}

// A transaction applies several changes at once, or none: here a cancel
// and a submit, only if the draft is still at the version read.
func ExampleStore_Transact() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "norn-example-")
	defer os.RemoveAll(dir)
	s, _ := embedded.Open(ctx, embedded.Options{Dir: dir})
	defer s.Close()
	sub, _ := s.Submit(ctx, norn.NewTask{ID: "draft-7", Queue: "publish"})

	res, err := s.Transact(ctx, norn.Txn{
		Require: []norn.Requirement{{ID: "draft-7", Version: sub[0].Task.Version}},
		Cancel:  []string{"draft-7"},
		Submit:  []norn.NewTask{{ID: "final-7", Queue: "publish"}},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(res.Cancelled), "cancelled,", len(res.Submitted), "submitted")
	d, _ := s.Get(ctx, "draft-7")
	fmt.Println("draft-7 is", d.Status)
	// Output:
	// 1 cancelled, 1 submitted
	// draft-7 is cancelled
}
