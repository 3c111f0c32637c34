// Command goworker is a Norn worker written with the Go SDK (package worker).
// It serves two queues against a running norn server:
//
//   - "greetings": spec {"name": "Ada"} → result {"greeting": "Hello, Ada!"};
//     a spec without a name is aborted (retrying cannot fix it).
//   - "dag-demo": the steps submitted by examples/dag; each step sleeps a
//     little, reporting progress and checkpointing to the task log, and
//     returns the results of its dependencies (or, for the callback of a
//     batch submitted by examples/fanout, of the batch's members) combined
//     with its own name.
//
// Run it (with `go run ./cmd/norn server` running elsewhere):
//
//	go run ./examples/goworker
//	go run ./cmd/norn submit greetings '{"name":"Ada"}'
//
// Stop it with Ctrl-C: running tasks get a few seconds to finish, the rest
// are yielded back to their queues for another worker.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/worker"
)

func main() {
	server := flag.String("server", envOr("NORN_SERVER", "http://127.0.0.1:7070"), "norn server URL")
	token := flag.String("token", os.Getenv("NORN_TOKEN"), "bearer token")
	concurrency := flag.Int("c", 4, "most tasks at once")
	flag.Parse()

	c, err := client.New(*server, client.WithToken(*token))
	if err != nil {
		fmt.Fprintln(os.Stderr, "goworker:", err)
		os.Exit(2)
	}
	defer c.Close()

	mux := worker.NewServeMux()
	mux.HandleFunc("greetings", greet)
	mux.Handle("dag-demo", &dagStep{store: c})

	w, err := worker.New(c, worker.Config{
		Handler:       mux,
		Concurrency:   *concurrency,
		ShutdownGrace: 5 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "goworker:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	slog.Info("goworker: serving", "server", *server, "queues", w.Config().Queues)
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "goworker:", err)
		os.Exit(1)
	}
}

// greet answers {"name": "..."} with a greeting.
func greet(ctx context.Context, t *worker.Task) error {
	var spec struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(t.Spec, &spec); err != nil || spec.Name == "" {
		// A malformed spec fails the same way every time: abort, never retry.
		return worker.WithCode("bad_spec", worker.Abort(errors.New(`spec must be {"name": "..."}`)))
	}
	return t.SetResult(map[string]string{"greeting": "Hello, " + spec.Name + "!"})
}

// dagStep runs one step of the examples/dag pipeline.
type dagStep struct{ store norn.ClientAPI }

// ServeTask resumes from the last checkpoint of an earlier attempt, works in
// a few slices reporting progress, and combines its dependencies' results.
func (d *dagStep) ServeTask(ctx context.Context, t *worker.Task) error {
	var spec struct {
		Step string `json:"step"`
	}
	if err := json.Unmarshal(t.Spec, &spec); err != nil {
		return worker.Abort(err)
	}
	// Resume: an earlier attempt may have logged how far it got.
	start := 0
	prev, err := t.PreviousLog(ctx)
	if err != nil {
		return err
	}
	for _, e := range prev {
		var cp struct{ Slice int }
		if json.Unmarshal(e.Data, &cp) == nil {
			start = cp.Slice + 1
		}
	}
	const slices = 5
	for i := start; i < slices; i++ {
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			// Cancelled, lease lost or shutting down: stop now. What we
			// return is not reported unless the worker yields the task.
			return context.Cause(ctx)
		}
		if _, err := t.Log(ctx, map[string]int{"slice": i}); err != nil {
			return err
		}
		t.SetProgress(float64(i+1) / slices)
	}
	inputs := map[string]json.RawMessage{}
	if len(t.DependsOn) > 0 {
		deps, _, err := d.store.GetMany(ctx, t.DependsOn)
		if err != nil {
			return err
		}
		for _, dep := range deps {
			inputs[dep.ID] = dep.Result
		}
	}
	// A batch's callback (examples/fanout) merges its members' results.
	if b := t.Labels[norn.LabelBatch]; b != "" {
		page, err := d.store.List(ctx, norn.Query{Filter: norn.Filter{Batch: b}, Limit: norn.MaxListLimit})
		if err != nil {
			return err
		}
		for _, m := range page.Tasks {
			inputs[m.ID] = m.Result
		}
	}
	// A real step writing elsewhere would pass t.Lease along as a fencing
	// token, so the target can refuse writes from a superseded attempt.
	return t.SetResult(map[string]any{"step": spec.Step, "lease": t.Lease, "inputs": inputs})
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
