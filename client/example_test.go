package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/internal/oacheck"
	"github.com/nornq/norn/server"
	"github.com/nornq/norn/store/embedded"
)

// startServer runs a norn server on a free loopback port with an embedded
// store in a temporary directory, as `norn server` does; stop ends both.
func startServer() (url string, stop func()) {
	dir, err := os.MkdirTemp("", "norn-example-")
	if err != nil {
		panic(err)
	}
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	// The examples' traffic is checked against the OpenAPI document like
	// every test's; an example has no t to fail, so stop panics instead.
	chk, err := oacheck.New(server.OpenAPI())
	if err != nil {
		panic(err)
	}
	var mu sync.Mutex
	var bad []error
	wrap := func(h http.Handler) http.Handler {
		return chk.Middleware(h, func(err error) { mu.Lock(); bad = append(bad, err); mu.Unlock() })
	}
	srv, err := server.New(server.Config{Addr: "127.0.0.1:0", Store: st, WrapHandler: wrap})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	return srv.URL(), func() {
		cancel()
		<-done
		st.Close()
		os.RemoveAll(dir)
		mu.Lock()
		defer mu.Unlock()
		if len(bad) > 0 {
			panic(fmt.Sprintf("the example's traffic does not match server/openapi.json: %v", bad))
		}
	}
}

// A client submits tasks to a server over HTTP and reads them back.
func Example() {
	url, stop := startServer()
	defer stop()
	ctx := context.Background()

	c, err := client.New(url) // with tokens: client.New(url, client.WithToken(tok))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	sub, err := c.Submit(ctx, norn.NewTask{ID: "resize-42", Queue: "images", Spec: json.RawMessage(`{"w":640}`)})
	if err != nil {
		panic(err)
	}
	fmt.Println(sub[0].Task.ID, sub[0].Task.Status)
	n, _ := c.Count(ctx, norn.Filter{Queues: []string{"images"}, Statuses: []norn.Status{norn.StatusReady}})
	fmt.Println(n, "ready in images")
	// Output:
	// resize-42 ready
	// 1 ready in images
}

// A worker's side without the worker package: claim, then complete under
// the lease the claim gave.
func ExampleClient_Claim() {
	url, stop := startServer()
	defer stop()
	ctx := context.Background()
	c, _ := client.New(url)
	defer c.Close()
	_, _ = c.Submit(ctx, norn.NewTask{ID: "job-1", Queue: "jobs"})

	id, _ := c.RegisterWorker(ctx, norn.WorkerInfo{Name: "example"})
	tasks, _ := c.Claim(ctx, norn.ClaimRequest{Worker: id, Queues: []string{"jobs"}, N: 10})
	for _, t := range tasks {
		ref := norn.LeaseRef{TaskID: t.ID, Worker: id, Lease: t.Lease}
		if err := c.Complete(ctx, ref, json.RawMessage(`{"ok":true}`)); err != nil {
			panic(err)
		}
		done, _ := c.Get(ctx, t.ID)
		fmt.Println(done.ID, done.Status, string(done.Result))
	}
	// Output: job-1 completed {"ok":true}
}

// A schedule submits a task at every tick of its cron expression; Trigger
// fires one now.
func ExampleClient_PutSchedule() {
	url, stop := startServer()
	defer stop()
	ctx := context.Background()
	c, _ := client.New(url)
	defer c.Close()

	sc, err := c.PutSchedule(ctx, norn.Schedule{Name: "nightly-report", Queue: "reports", Cron: "0 3 * * *", Timezone: "UTC"})
	if err != nil {
		panic(err)
	}
	fmt.Println(sc.Name, sc.Cron)
	fired, _ := c.TriggerSchedule(ctx, "nightly-report")
	fmt.Println(fired.Task.Queue, fired.Task.Status)
	// Output:
	// nightly-report 0 3 * * *
	// reports ready
}

// Queue settings apply to tasks that do not set their own: here a retry
// policy and a limit of two tasks running at once.
func ExampleClient_UpdateQueue() {
	url, stop := startServer()
	defer stop()
	ctx := context.Background()
	c, _ := client.New(url)
	defer c.Close()

	two := 2
	q, err := c.UpdateQueue(ctx, "emails", norn.QueueUpdate{
		Retry:      &norn.RetryPolicy{MaxRetries: 5, Base: norn.Duration(1e9), Max: norn.Duration(60e9)},
		MaxRunning: &two,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(q.Name, q.Defaults.Retry.MaxRetries, q.MaxRunning)
	// Output: emails 5 2
}
