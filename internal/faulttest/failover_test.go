package faulttest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn/internal/pgtest"
)

// TestFailover: two `norn server` nodes on a PostgreSQL primary with a
// synchronous streaming standby, through a multi-host URL that targets the
// writable server (target_session_attrs=read-write). Under a workload the
// primary dies (immediate stop) and the standby is promoted: no
// acknowledged submit is lost, no task is completed twice, and the nodes
// serve again, without a restart, within seconds of the promotion; the
// monitor lead comes back.
func TestFailover(tt *testing.T) {
	tt.Parallel()
	t := loudT(tt)
	ctx := context.Background()
	primary := pgtest.NewCluster(t)
	standby := primary.Standby(t)
	conn, err := pgx.Connect(ctx, primary.URL())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = 'standby'", "SELECT pg_reload_conf()"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=5",
		primary.Port(), standby.Port())
	nodes := make([]*Node, 2)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i] = StartNode(t, "node"+strconv.Itoa(i), "--store", url, "--schema", "fo", "--migrate")
		}()
	}
	wg.Wait()
	var promoted time.Time
	faults := []Fault{{Name: "failover", Inject: func(context.Context) (func() error, string, error) {
		if err := primary.Stop("immediate"); err != nil {
			return nil, "", err
		}
		// Taken before the promotion: a node can take the monitor lead on
		// the new primary the moment it accepts writes, before Promote
		// returns (on a loaded machine, well before).
		promoted = time.Now()
		if err := standby.Promote(); err != nil {
			return nil, "", err
		}
		return nil, "postgres", nil
	}, Recovered: func(ctx context.Context) error {
		for _, n := range nodes {
			if err := answers(ctx, n.C); err != nil {
				return fmt.Errorf("%s: %w", n.Name, err)
			}
		}
		return nil
	}}}
	nm := &Nemesis{Quiet: 2 * time.Second, Hold: map[string]time.Duration{"failover": 0}}
	run(t, nodes, 2*time.Second, faults, nm, 0, nil)
	back := time.Now()
	for _, e := range nm.Events() {
		back = e.Healed.Add(e.Recovery)
	}
	t.Logf("the nodes served again %s after the promotion", back.Sub(promoted).Round(time.Millisecond))
	await.Until(t, 30*time.Second, "a node takes the monitor lead on the new primary", func() bool {
		for _, n := range nodes {
			if lineAt(n, msgLeads).After(promoted) {
				return true
			}
		}
		return false
	})
}
