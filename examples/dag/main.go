// Command dag submits a small pipeline of dependent tasks to the "dag-demo"
// queue and follows it until the last step finishes:
//
//	fetch ──► resize-small ──┐
//	      └─► resize-large ──┴──► publish
//
// The four tasks go in one atomic batch; the resize steps stay blocked until
// fetch completes, publish until both resizes complete. Run a worker for the
// queue (go run ./examples/goworker), then:
//
//	go run ./examples/dag
//
// Ids are derived from -run, so submitting the same run twice is idempotent.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
)

func main() {
	server := flag.String("server", envOr("NORN_SERVER", "http://127.0.0.1:7070"), "norn server URL")
	token := flag.String("token", os.Getenv("NORN_TOKEN"), "bearer token")
	run := flag.String("run", time.Now().UTC().Format("20060102-150405"), "run name; task ids are dag-<run>-<step>")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up waiting after this long")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := submitAndFollow(ctx, *server, *token, *run, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "dag:", err)
		os.Exit(1)
	}
}

func submitAndFollow(ctx context.Context, server, token, run string, timeout time.Duration) error {
	c, err := client.New(server, client.WithToken(token))
	if err != nil {
		return err
	}
	defer c.Close()
	id := func(step string) string { return "dag-" + run + "-" + step }
	step := func(name string, deps ...string) norn.NewTask {
		spec, _ := json.Marshal(map[string]string{"step": name})
		t := norn.NewTask{ID: id(name), Queue: "dag-demo", Spec: spec, Labels: map[string]string{"run": run},
			Retry: &norn.RetryPolicy{MaxRetries: 3, Base: norn.Duration(time.Second)}}
		for _, d := range deps {
			t.DependsOn = append(t.DependsOn, id(d))
		}
		return t
	}
	subs, err := c.Submit(ctx,
		step("fetch"),
		step("resize-small", "fetch"),
		step("resize-large", "fetch"),
		step("publish", "resize-small", "resize-large"),
	)
	if err != nil {
		return err
	}
	var ids []string
	for _, s := range subs {
		note := ""
		if s.Duplicate {
			note = " (already submitted)"
		}
		fmt.Printf("%-32s %s%s\n", s.Task.ID, s.Task.Status, note)
		ids = append(ids, s.Task.ID)
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := map[string]norn.Status{}
	for {
		tasks, _, err := c.GetMany(ctx, ids)
		if err != nil {
			return err
		}
		finished := 0
		for _, t := range tasks {
			if last[t.ID] != t.Status {
				fmt.Printf("%s %-32s %s\n", time.Now().Format("15:04:05.000"), t.ID, t.Status)
				last[t.ID] = t.Status
			}
			if t.Status.Terminal() {
				finished++
			}
			if t.ID == id("publish") && t.Status.Terminal() {
				out, _ := json.MarshalIndent(t.Result, "", "  ")
				fmt.Printf("publish %s; result:\n%s\n", t.Status, out)
				if t.Status != norn.StatusCompleted {
					return fmt.Errorf("pipeline ended %s", t.Status)
				}
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d steps finished: %w (is a worker serving dag-demo running?)", finished, len(ids), ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
