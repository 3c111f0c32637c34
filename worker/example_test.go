package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/embedded"
	"github.com/nornq/norn/worker"
)

// A worker claims tasks of the queues its ServeMux has handlers for, runs
// each handler with the task's lease kept alive, and reports the outcome:
// a nil error completes the task with the result set; worker.Abort ends it
// for good; any other error is a failure, retried per the task's policy.
// The store here is embedded; over HTTP pass a *client.Client instead.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, _ := os.MkdirTemp("", "norn-example-")
	defer os.RemoveAll(dir)
	st, err := embedded.Open(ctx, embedded.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer st.Close()

	done := make(chan struct{}, 2)
	mux := worker.NewServeMux()
	mux.HandleFunc("greetings", func(ctx context.Context, t *worker.Task) error {
		defer func() { done <- struct{}{} }()
		var spec struct{ Name string }
		if err := json.Unmarshal(t.Spec, &spec); err != nil || spec.Name == "" {
			return worker.Abort(errors.New("a greeting needs a name"))
		}
		return t.SetResult(map[string]string{"greeting": "Hello, " + spec.Name + "!"})
	})
	w, err := worker.New(st, worker.Config{Handler: mux, Concurrency: 1, Wait: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()

	_, _ = st.Submit(ctx,
		norn.NewTask{ID: "hello-ada", Queue: "greetings", Spec: json.RawMessage(`{"name":"Ada"}`)},
		norn.NewTask{ID: "hello-nobody", Queue: "greetings", Spec: json.RawMessage(`{}`)},
	)
	<-done
	<-done
	_ = w.Shutdown(context.Background())
	<-stopped

	for _, id := range []string{"hello-ada", "hello-nobody"} {
		t, _ := st.Get(ctx, id)
		fmt.Println(id, t.Status, string(t.Result))
	}
	// Output:
	// hello-ada completed {"greeting":"Hello, Ada!"}
	// hello-nobody aborted
}

// A handler that finds it cannot work yet (a resource is busy, a partner
// says come back later) snoozes the task instead of failing it: the task
// waits, no error is recorded and the attempt does not count, so it does
// not spend a retry.
func ExampleSnooze() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, _ := os.MkdirTemp("", "norn-example-")
	defer os.RemoveAll(dir)
	st, err := embedded.Open(ctx, embedded.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer st.Close()

	served := make(chan struct{}, 1)
	w, err := worker.New(st, worker.Config{Queues: []string{"reports"}, Concurrency: 1, Wait: 100 * time.Millisecond,
		Handler: worker.HandlerFunc(func(ctx context.Context, t *worker.Task) error {
			defer func() { served <- struct{}{} }()
			return worker.Snooze(time.Hour) // the data for the report is not in yet
		})})
	if err != nil {
		panic(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	_, _ = st.Submit(ctx, norn.NewTask{ID: "daily-report", Queue: "reports"})
	<-served
	_ = w.Shutdown(context.Background())
	<-stopped

	t, _ := st.Get(ctx, "daily-report")
	last := t.History[len(t.History)-1]
	fmt.Println(t.Status, "for", t.RunAt.Sub(last.Time), "attempts", t.Attempts, "errors", len(t.Errors), last.Type)
	// Output:
	// scheduled for 1h0m0s attempts 0 errors 0 TaskSnooze
}

// Back-pressure per key: each tenant's webhooks go to the tenant's own
// API, which may answer 429 with a Retry-After. SnoozeKey snoozes the task
// and holds back every task of its concurrency key until then, on every
// worker, while other tenants' tasks keep flowing. The queue needs a key
// rate limit (or the key its own) for the store to hold the key back.
func ExampleSnoozeKey() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, _ := os.MkdirTemp("", "norn-example-")
	defer os.RemoveAll(dir)
	st, err := embedded.Open(ctx, embedded.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer st.Close()
	// Every tenant may get 10 webhooks a second.
	if _, err := st.UpdateQueue(ctx, "webhooks", norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 10}}); err != nil {
		panic(err)
	}
	// A stand-in for the tenants' APIs: acme is over its quota for a minute.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/acme" {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer api.Close()

	handled := make(chan string, 4)
	mux := worker.NewServeMux()
	mux.HandleFunc("webhooks", func(ctx context.Context, t *worker.Task) error {
		defer func() { handled <- t.ID }()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/"+t.ConcurrencyKey, bytes.NewReader(t.Spec))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err // retried per the task's policy
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
			if err != nil {
				secs = 30
			}
			return worker.SnoozeKey(time.Duration(secs) * time.Second)
		}
		return nil
	})
	w, err := worker.New(st, worker.Config{Handler: mux, Concurrency: 1, Wait: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()

	_, _ = st.Submit(ctx, norn.NewTask{ID: "acme-1", Queue: "webhooks", ConcurrencyKey: "acme"})
	<-handled // answered 429: acme is held back for 60 s
	_, _ = st.Submit(ctx,
		norn.NewTask{ID: "acme-2", Queue: "webhooks", ConcurrencyKey: "acme"},
		norn.NewTask{ID: "globex-1", Queue: "webhooks", ConcurrencyKey: "globex"},
	)
	<-handled // globex's task, claimed past acme's
	_ = w.Shutdown(context.Background())
	<-stopped

	for _, id := range []string{"acme-1", "acme-2", "globex-1"} {
		t, _ := st.Get(ctx, id)
		fmt.Println(id, t.Status)
	}
	// Output:
	// acme-1 scheduled
	// acme-2 ready
	// globex-1 completed
}

// A chunk handler gets the tasks of one claim together, for work that is
// cheaper in bulk (one insert for many rows). With Min the worker's claims
// are batch claims: they wait until Min tasks are ready, or until the one
// ready longest has waited Linger. Each task still has its own lease and
// outcome: here one row is refused and only its task fails.
func ExampleChunk() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, _ := os.MkdirTemp("", "norn-example-")
	defer os.RemoveAll(dir)
	st, err := embedded.Open(ctx, embedded.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer st.Close()

	done := make(chan int, 1)
	insert := worker.ChunkHandlerFunc(func(ctx context.Context, tasks []*worker.Task) []error {
		defer func() { done <- len(tasks) }()
		errs := make([]error, len(tasks))
		for i, t := range tasks {
			var row struct{ Name string }
			if err := json.Unmarshal(t.Spec, &row); err != nil || row.Name == "" {
				errs[i] = worker.Abort(errors.New("a row needs a name"))
			}
		}
		// ... insert the good rows in one statement ...
		return errs
	})
	w, err := worker.New(st, worker.Config{Queues: []string{"rows"}, Concurrency: 10, Wait: 100 * time.Millisecond,
		Chunk: &worker.Chunk{Handler: insert, Min: 3, Linger: time.Second}})
	if err != nil {
		panic(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()

	_, _ = st.Submit(ctx,
		norn.NewTask{ID: "row-ada", Queue: "rows", Spec: json.RawMessage(`{"name":"Ada"}`)},
		norn.NewTask{ID: "row-grace", Queue: "rows", Spec: json.RawMessage(`{"name":"Grace"}`)},
		norn.NewTask{ID: "row-empty", Queue: "rows", Spec: json.RawMessage(`{}`)},
	)
	fmt.Println("chunk of", <-done)
	_ = w.Shutdown(context.Background())
	<-stopped

	for _, id := range []string{"row-ada", "row-grace", "row-empty"} {
		t, _ := st.Get(ctx, id)
		fmt.Println(id, t.Status)
	}
	// Output:
	// chunk of 3
	// row-ada completed
	// row-grace completed
	// row-empty aborted
}

// With GroupBy every chunk holds tasks that share a value: here the
// label "table", so each chunk is one bulk insert into one table. Min and
// Linger count per table: the two "users" rows make a chunk at once,
// while the one "orders" row waits for a second, or for the linger.
func ExampleChunk_groupBy() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, _ := os.MkdirTemp("", "norn-example-")
	defer os.RemoveAll(dir)
	st, err := embedded.Open(ctx, embedded.Options{Dir: dir})
	if err != nil {
		panic(err)
	}
	defer st.Close()

	chunks := make(chan string, 2)
	insert := worker.ChunkHandlerFunc(func(ctx context.Context, tasks []*worker.Task) []error {
		// Every task of the chunk has the same table.
		chunks <- fmt.Sprintf("%d rows into %s", len(tasks), tasks[0].Labels["table"])
		return nil
	})
	w, err := worker.New(st, worker.Config{Queues: []string{"rows"}, Concurrency: 10, Wait: 100 * time.Millisecond,
		Chunk: &worker.Chunk{Handler: insert, Min: 2, Linger: 300 * time.Millisecond, GroupBy: "label:table"}})
	if err != nil {
		panic(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()

	row := func(id, table string) norn.NewTask {
		return norn.NewTask{ID: id, Queue: "rows", Labels: map[string]string{"table": table}}
	}
	_, _ = st.Submit(ctx, row("u1", "users"), row("o1", "orders"), row("u2", "users"))
	fmt.Println(<-chunks)
	fmt.Println(<-chunks)
	_ = w.Shutdown(context.Background())
	<-stopped
	// Output:
	// 2 rows into users
	// 1 rows into orders
}
