package clustertest

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/nornbin"
	"github.com/nornq/norn/internal/pgtest"
)

// TestThroughputSharedByNodes: every node counts the cluster's events, a
// node that stops writes what it counted, and a node started afterwards
// answers the same history from the store (max semantics: the nodes'
// writes of the same minutes do not add up).
func TestThroughputSharedByNodes(t *testing.T) {
	ctx := context.Background()
	pg := pgtest.NewCluster(t)
	const schema = "tput"
	nodes := startNodes(t, 2, pg.URL(), schema)
	const n = 50
	var batch []norn.NewTask
	for i := range n {
		batch = append(batch, norn.NewTask{ID: fmt.Sprintf("t%02d", i), Queue: "counted"})
	}
	if _, err := nodes[0].c.Submit(ctx, batch...); err != nil {
		t.Fatal(err)
	}
	submitted := func(nd *node) (bool, error) {
		h, err := nd.c.Throughput(ctx, time.Time{}, "counted")
		if err != nil {
			return false, err
		}
		var got int64
		for _, p := range h.Points {
			got += p.Submitted
		}
		return got == n, nil
	}
	for _, nd := range nodes {
		waitFor(t, nd.name+" counts the submits", 30*time.Second, func() (bool, error) { return submitted(nd) })
	}
	// A graceful stop writes the minute under way.
	_ = nodes[0].cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-nodes[0].done:
	case <-time.After(30 * time.Second):
		t.Fatal("node0 did not stop on SIGTERM")
	}
	late := startNode(t, nornbin.Path(t), "late", pg.URL(), schema)
	if ok, err := submitted(late); err != nil || !ok {
		h, _ := late.c.Throughput(ctx, time.Time{}, "counted")
		t.Fatalf("a node started after the submits answers %+v (err %v), want %d submitted", h, err, n)
	}
	if ok, err := submitted(nodes[1]); err != nil || !ok {
		t.Fatalf("node1 no longer answers %d submitted (err %v)", n, err)
	}
}
