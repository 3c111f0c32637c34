package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
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
	deadline := time.Now().Add(10 * time.Second)
	for {
		h, err := c.Throughput(ctx, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if sum(h) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("history %+v never counted both submits", h)
		}
		time.Sleep(10 * time.Millisecond)
	}
	h, err := c.Throughput(ctx, time.Now().Add(-time.Hour), "a")
	if err != nil || sum(h) != 1 || len(h.Queues) != 1 || h.Queues[0] != "a" || h.Since.Before(time.Now().Add(-61*time.Minute)) {
		t.Fatalf("queue a for the last hour: %+v, %v", h, err)
	}
	if _, err := c.Throughput(ctx, time.Time{}, "bad queue"); norn.CodeOf(err) != norn.CodeInvalidArgument {
		t.Fatalf("bad queue name: %v", err)
	}
}
