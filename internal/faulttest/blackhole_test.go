package faulttest

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
)

// TestBlackholedNode: the monitor leader's link to PostgreSQL stops
// forwarding without closing (a blackhole, as a dead switch gives). Within
// a few seconds the node answers 503 naming the cause instead of hanging,
// /readyz says it is not ready, and the node steps down from the monitor
// lead by its own clock before the other node takes it. Healed, it serves
// again without a restart.
func TestBlackholedNode(tt *testing.T) {
	tt.Parallel()
	t := loudT(tt)
	pg := pgtest.NewCluster(t)
	p, err := NewProxy(net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.Port())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	via := "postgres://postgres@" + p.Addr() + "/postgres?sslmode=disable&connect_timeout=5"
	n0 := StartNode(t, "node0", "--store", via, "--schema", "bh", "--migrate")
	nodes := []*Node{n0}
	await.Until(t, 15*time.Second, "node0 leads the monitor", func() bool { return Leader(nodes) == n0 })
	direct := "postgres://postgres@127.0.0.1:" + strconv.Itoa(pg.Port()) + "/postgres?sslmode=disable"
	n1 := StartNode(t, "node1", "--store", direct, "--schema", "bh")
	nodes = append(nodes, n1)

	start := time.Now()
	p.Blackhole()
	// A read answers 503 with its cause, well before TCP would give up.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = n0.C.Count(ctx, norn.Filter{Queues: []string{queue}})
	detected := time.Since(start)
	var ne *norn.Error
	if !errors.As(err, &ne) || ne.Code != norn.CodeUnavailable || !strings.Contains(ne.Message, "does not answer") {
		t.Fatalf("a read through the blackhole after %s: %v, want unavailable saying the database does not answer", detected, err)
	}
	if detected > 10*time.Second {
		t.Errorf("the read answered 503 after %s, want within 10s", detected)
	}
	// Then calls fail at once, and /readyz says why.
	t0 := time.Now()
	res, err := http.Get(n0.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || time.Since(t0) > 2*time.Second {
		t.Errorf("/readyz of the cut node: %d after %s, want 503 at once", res.StatusCode, time.Since(t0))
	}
	await.Until(t, 20*time.Second, "node1 takes the monitor lead", func() bool { return Leader(nodes) == n1 })
	stepDown, takeOver := lineAt(n0, msgLost), lineAt(n1, msgLeads)
	if stepDown.IsZero() || !stepDown.Before(takeOver) {
		t.Errorf("node0 stepped down at %s, node1 took the lead at %s: the old leader must step down first",
			stepDown.Format("15:04:05.000"), takeOver.Format("15:04:05.000"))
	}
	t.Logf("blackhole at %s: 503 after %s, node0 stepped down after %s, node1 led after %s",
		start.Format("15:04:05.000"), detected.Round(time.Millisecond), stepDown.Sub(start).Round(time.Millisecond),
		takeOver.Sub(start).Round(time.Millisecond))

	p.Heal()
	healed := time.Now()
	if err := answers(ctx, n0.C); err != nil {
		t.Fatalf("node0 after the blackhole healed: %v", err)
	}
	t.Logf("node0 served again %s after the heal", time.Since(healed).Round(time.Millisecond))
}

// lineAt is when n last logged a message starting with msg (zero: never).
func lineAt(n *Node, msg string) time.Time {
	var at time.Time
	for _, l := range n.Lines() {
		if m, _ := l.Rec["msg"].(string); strings.HasPrefix(m, msg) {
			if t, ok := recTime(l.Rec, "time"); ok {
				at = t
			}
		}
	}
	return at
}
