package client_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/internal/await"
)

func TestThroughput(t *testing.T) {
	c := remoteStore(t, nil).(*client.Client)
	ctx := context.Background()
	if _, err := c.Submit(ctx, norn.NewTask{Queue: "a"}, norn.NewTask{Queue: "b"}); err != nil {
		t.Fatal(err)
	}
	sum := func(h norn.Throughput) (n int64) {
		for _, p := range h.Points {
			n += p.Submitted
		}
		return n
	}
	await.Check(t, 10*time.Second, "the history to count both submits", func() (string, error) {
		h, err := c.Throughput(ctx, time.Time{})
		if err != nil || sum(h) == 2 {
			return "", err
		}
		return fmt.Sprintf("history %+v", h), nil
	})
	h, err := c.Throughput(ctx, time.Now().Add(-time.Hour), "a")
	if err != nil || sum(h) != 1 || len(h.Queues) != 1 || h.Queues[0] != "a" || h.Since.Before(time.Now().Add(-61*time.Minute)) {
		t.Fatalf("queue a for the last hour: %+v, %v", h, err)
	}
	if _, err := c.Throughput(ctx, time.Time{}, "bad queue"); norn.CodeOf(err) != norn.CodeInvalidArgument {
		t.Fatalf("bad queue name: %v", err)
	}
}
