// Command fanout runs a fan-out/fan-in pipeline with a batch: it creates a
// batch of resize steps in the "dag-demo" queue, sealed with its members in
// one call, whose on_success callback is a "merge" step. Once every resize
// completed, Norn submits the merge exactly once; its handler (in
// examples/goworker) reads the batch's members' results. Run a worker for
// the queue (go run ./examples/goworker), then:
//
//	go run ./examples/fanout -n 5
//
// The batch id is derived from -run, so running the same run twice is
// refused as a conflict instead of doing the work twice.
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
	run := flag.String("run", time.Now().UTC().Format("20060102-150405"), "run name; the batch id is fanout-<run>")
	n := flag.Int("n", 5, "resize steps to fan out")
	timeout := flag.Duration("timeout", 2*time.Minute, "give up waiting after this long")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := fanOut(ctx, *server, *token, "fanout-"+*run, *n, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

func step(name string) json.RawMessage {
	spec, _ := json.Marshal(map[string]string{"step": name})
	return spec
}

func fanOut(ctx context.Context, server, token, id string, n int, timeout time.Duration) error {
	c, err := client.New(server, client.WithToken(token))
	if err != nil {
		return err
	}
	defer c.Close()
	nb := norn.NewBatch{ID: id, Seal: true,
		OnSuccess:  &norn.NewTask{Queue: "dag-demo", Spec: step("merge")},
		OnComplete: &norn.NewTask{Queue: "dag-demo", Spec: step("report")}}
	for i := range n {
		nb.Tasks = append(nb.Tasks, norn.NewTask{Queue: "dag-demo", Spec: step(fmt.Sprintf("resize-%d", i))})
	}
	created, err := c.CreateBatch(ctx, nb)
	if err != nil {
		return err
	}
	fmt.Printf("batch %s: %d members, %s\n", id, created.Batch.Total, created.Batch.State)

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		b, err := c.GetBatch(ctx, id)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s ended %d of %d", b.State, b.Counts[norn.StatusCompleted]+b.Counts[norn.StatusAborted]+b.Counts[norn.StatusCancelled], b.Total)
		if line != last {
			fmt.Printf("%s %s\n", time.Now().Format("15:04:05.000"), line)
			last = line
		}
		if b.State == norn.BatchDone && b.SuccessTask != "" {
			merge, err := c.Get(ctx, b.SuccessTask)
			if err != nil {
				return err
			}
			if merge.Status.Terminal() {
				out, _ := json.MarshalIndent(merge.Result, "", "  ")
				fmt.Printf("merge %s; result:\n%s\n", merge.Status, out)
				return nil
			}
		}
		if b.State == norn.BatchDone && b.Final[norn.StatusCompleted] != b.Total {
			return fmt.Errorf("batch done with failed members: %v", b.Final)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("batch %s: %w (is a worker serving dag-demo running?)", b.State, ctx.Err())
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
