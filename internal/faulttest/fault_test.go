package faulttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/internal/await"
	"github.com/nornq/norn/internal/nornbin"
	"github.com/nornq/norn/internal/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m, nornbin.Remove, repeatFailures)
}

// soak returns the run length asked for with NORN_FAULT_MINUTES (0: the
// short form, one pass over every fault).
func soak(t testing.TB) time.Duration {
	v := os.Getenv("NORN_FAULT_MINUTES")
	if v == "" {
		return 0
	}
	m, err := strconv.ParseFloat(v, 64)
	if err != nil || m <= 0 {
		t.Fatalf("NORN_FAULT_MINUTES=%q: want a positive number of minutes", v)
	}
	return time.Duration(m * float64(time.Minute))
}

// answers waits until c serves a read.
func answers(ctx context.Context, c *client.Client) error {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Count(cctx, norn.Filter{Queues: []string{queue}})
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// run drives the workload while the nemesis runs faults, drains the queue
// and checks the history. It returns the workload and the checker's
// report. With mayLose (the database may lose acknowledged writes) the
// losses are the report's to tell, not failures: only what holds whatever
// was lost is checked.
func run(t testing.TB, nodes []*Node, lease time.Duration, faults []Fault, nm *Nemesis, length time.Duration, diag func() string, mayLose bool) (*Workload, *Report) {
	t.Helper()
	clients := make([]*client.Client, len(nodes))
	for i, n := range nodes {
		clients[i] = n.C
	}
	w := NewWorkload(clients, lease)
	w.MayLose = mayLose
	ctx := context.Background()
	pctx, stopProducers := context.WithCancel(ctx)
	wctx, stopWorkers := context.WithCancel(ctx)
	var pwg, wwg sync.WaitGroup
	for i := range 3 {
		pwg.Add(1)
		go func() { defer pwg.Done(); w.Produce(pctx, i, 10, 50*time.Millisecond) }()
	}
	for i := range 6 {
		wwg.Add(1)
		go func() { defer wwg.Done(); w.Work(wctx, i, 5) }()
	}
	defer func() { stopProducers(); stopWorkers(); pwg.Wait(); wwg.Wait() }()

	// Let the load settle before the first fault.
	await.Until(t, time.Minute, "100 completions under load", func() bool { return w.Ops.Completes.Load() >= 100 })
	start := time.Now()
	nctx, stopNemesis := context.WithCancel(ctx)
	if length > 0 {
		time.AfterFunc(length, stopNemesis)
	}
	nm.Run(nctx, faults, length > 0)
	stopNemesis()
	faultTime := time.Since(start)
	stopProducers()
	pwg.Wait()

	// Drain: every task submitted completes once the faults are healed.
	drainStart := time.Now()
	pending := norn.Filter{Queues: []string{queue}, Statuses: []norn.Status{norn.StatusReady, norn.StatusRunning, norn.StatusScheduled}}
	// Liveness: the backlog must keep shrinking; a minute without progress
	// (or ten in all) is a failure.
	best, progress := int64(-1), time.Now()
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := nodes[0].C.Count(cctx, pending)
		cancel()
		if err == nil && n == 0 {
			break
		}
		if err == nil && (best < 0 || n < best) {
			best, progress = n, time.Now()
		}
		if time.Since(progress) > time.Minute || time.Since(drainStart) > 10*time.Minute {
			t.Errorf("queue not drained after the last fault: %d pending after %v, the last progress %v ago (%v)",
				n, time.Since(drainStart).Round(time.Second), time.Since(progress).Round(time.Second), err)
			if diag != nil {
				t.Logf("diagnostics:\n%s", diag())
			}
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	drain := time.Since(drainStart)
	stopWorkers()
	wwg.Wait()

	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	rep, err := Check(cctx, nodes[0].C, w)
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	gap, gapAt := w.MaxGap()
	t.Logf("%v under faults, drained in %v; longest time without an acknowledged completion %v (ended %s)",
		faultTime.Round(time.Millisecond), drain.Round(time.Millisecond), gap.Round(time.Millisecond), gapAt.Format("15:04:05.000"))
	t.Logf("operations: submit calls %d ok / %d failed, claim calls %d ok / %d failed, completions %d ok / %d failed calls, "+
		"lease lost %d (+%d on retries), 503 %d, timeouts %d, transport errors %d, not found (task lost) %d",
		w.Ops.Submits.Load(), w.Ops.SubmitErrs.Load(), w.Ops.Claims.Load(), w.Ops.ClaimErrs.Load(),
		w.Ops.Completes.Load(), w.Ops.CompleteErrs.Load(), w.Ops.LeaseLost.Load(), w.Ops.RetriedLeaseLost.Load(),
		w.Ops.Unavailable.Load(), w.Ops.Timeouts.Load(), w.Ops.Resets.Load(), w.Ops.Gone.Load())
	if c := w.Causes(); c != "" {
		t.Logf("503 answers by cause: %s", c)
	}
	t.Logf("faults:\n%s", nm.Summary())
	for _, e := range nm.Events() {
		t.Logf("  %s %s on %s: healed after %v, recovered %v later; err %v", e.Start.Format("15:04:05.000"), e.Fault, e.Target,
			e.Healed.Sub(e.Start).Round(time.Millisecond), e.Recovery.Round(time.Millisecond), e.Err)
		if e.Err != nil {
			t.Errorf("fault %s on %s: %v", e.Fault, e.Target, e.Err)
		}
	}
	t.Logf("check: %v", rep)
	problems := rep.Problems()
	if mayLose {
		problems = rep.Invariants()
	}
	for _, p := range problems {
		t.Error(p)
	}
	w.mu.Lock()
	for _, e := range w.errs {
		t.Errorf("answer no fault explains: %s", e)
	}
	w.mu.Unlock()
	if rep.Acked == 0 || rep.AckedCompletions == 0 {
		t.Errorf("nothing was acknowledged: the run proves nothing")
	}
	return w, rep
}

// TestCluster: three `norn server` nodes on one PostgreSQL, each reaching
// it through a proxy the test controls; producers and workers use the HTTP
// API of all three while the nemesis kills a node, restarts PostgreSQL,
// cuts, blackholes and delays a node's database connections and freezes
// the monitor leader for longer than a lease and than it takes another
// node to take the lead.
func TestCluster(tt *testing.T) {
	tt.Parallel()
	t := loudT(tt)
	length := soak(t)
	pg := pgtest.NewCluster(t)
	const lease = 2 * time.Second
	proxies := make([]*Proxy, 3)
	nodes := make([]*Node, 3)
	for i := range proxies {
		p, err := NewProxy(net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.Port())))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		proxies[i] = p
	}
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("node%d", i)
			// application_name tells the lock watch whose session holds the lead.
			url := "postgres://postgres@" + proxies[i].Addr() + "/postgres?sslmode=disable&connect_timeout=5&application_name=" + name
			nodes[i] = StartNode(t, name, "--store", url, "--schema", "fault", "--migrate")
		}()
	}
	wg.Wait()
	lw := WatchLock(pg.URL(), "fault", 100*time.Millisecond)
	defer lw.Stop()

	pick := func() int { return rand.IntN(len(nodes)) }
	leaderOr := func() *Node {
		if l := Leader(nodes); l != nil {
			return l
		}
		return nodes[pick()]
	}
	target := func(n *Node) string {
		if n == Leader(nodes) {
			return n.Name + " (leader)"
		}
		return n.Name
	}
	nodeBack := func(n *Node) func(context.Context) error {
		return func(ctx context.Context) error { return answers(ctx, n.C) }
	}
	var victim *Node // the node of the fault in progress
	allBack := func(ctx context.Context) error {
		for _, n := range nodes {
			if err := answers(ctx, n.C); err != nil {
				return fmt.Errorf("%s: %w", n.Name, err)
			}
		}
		return nil
	}
	faults := []Fault{
		{Name: "kill", Inject: func(context.Context) (func() error, string, error) {
			victim = leaderOr()
			tg := target(victim)
			victim.Kill()
			return victim.Start, tg, nil
		}, Recovered: func(ctx context.Context) error { return nodeBack(victim)(ctx) }},
		{Name: "pg-restart", Inject: func(context.Context) (func() error, string, error) {
			return nil, "postgres", pg.Restart("immediate")
		}, Recovered: allBack},
		{Name: "cut", Inject: func(context.Context) (func() error, string, error) {
			i := pick()
			victim = nodes[i]
			tg := target(victim)
			proxies[i].Cut()
			return func() error { proxies[i].Heal(); return nil }, tg, nil
		}, Recovered: func(ctx context.Context) error { return nodeBack(victim)(ctx) }},
		{Name: "delay", Inject: func(context.Context) (func() error, string, error) {
			i := pick()
			victim = nodes[i]
			tg := target(victim)
			proxies[i].Delay(200 * time.Millisecond)
			return func() error { proxies[i].Heal(); return nil }, tg, nil
		}, Recovered: func(ctx context.Context) error { return nodeBack(victim)(ctx) }},
		{Name: "blackhole", Inject: func(context.Context) (func() error, string, error) {
			i := pick()
			victim = nodes[i]
			tg := target(victim)
			proxies[i].Blackhole()
			return func() error { proxies[i].Heal(); return nil }, tg, nil
		}, Recovered: func(ctx context.Context) error { return nodeBack(victim)(ctx) }},
		{Name: "pause", Inject: func(context.Context) (func() error, string, error) {
			victim = leaderOr()
			tg := target(victim)
			victim.Stop()
			return func() error { victim.Cont(); return nil }, tg, nil
		}, Recovered: func(ctx context.Context) error { return nodeBack(victim)(ctx) }},
	}
	nm := &Nemesis{Quiet: 2 * time.Second, Hold: map[string]time.Duration{
		"kill": 2 * time.Second, "cut": 3 * time.Second, "delay": 4 * time.Second,
		"blackhole": 4 * time.Second,
		// Longer than a lease and than the takeover of the monitor lead.
		"pause": 4*lease + 2*time.Second,
	}}
	diag := func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pg.URL())
		if err != nil {
			return err.Error()
		}
		defer conn.Close(ctx)
		var b strings.Builder
		for _, q := range []string{
			`SELECT status, count(*), min(id), max(id) FROM fault.tasks GROUP BY status`,
			`SELECT pid, state, xact_start, state_change, wait_event_type, wait_event, left(query, 120) FROM pg_stat_activity WHERE datname = 'postgres' AND pid <> pg_backend_pid() ORDER BY xact_start NULLS LAST`,
			`SELECT locktype, mode, granted, pid, count(*) FROM pg_locks GROUP BY 1, 2, 3, 4 ORDER BY 5 DESC LIMIT 20`,
			`SELECT id, status, lease, owner, ready_at, updated, version FROM fault.tasks WHERE status = 'ready' ORDER BY ready_at LIMIT 5`,
		} {
			fmt.Fprintf(&b, "%s\n", q)
			rows, err := conn.Query(ctx, q)
			if err != nil {
				fmt.Fprintf(&b, "  %v\n", err)
				continue
			}
			for rows.Next() {
				vals, _ := rows.Values()
				fmt.Fprintf(&b, "  %v\n", vals)
			}
			rows.Close()
		}
		return b.String()
	}
	run(t, nodes, lease, faults, nm, length, diag, false)

	mr := CheckMonitor(nodes, nm.Events(), time.Now())
	t.Logf("monitor: %d leadership terms, %d sweeps that changed something, takeovers after the leader went away: %v",
		mr.Leads, mr.Sweeps, mr.Takeovers)
	for _, p := range mr.Problems {
		t.Errorf("monitor: %s", p)
	}
	if mr.Sweeps == 0 {
		t.Errorf("monitor: no sweep did anything; the check proves nothing")
	}
	// The same takeovers judged by the database: the lock's holder.
	lw.Stop()
	lr := CheckLockTakeovers(lw, nm.Events())
	t.Logf("leader lock in the database: %d samples (%d failed), %d holding terms, takeovers after the leader went away: %v",
		lr.Samples, lr.Failed, lr.Holders, lr.Takeovers)
	for _, p := range lr.Problems {
		t.Errorf("leader lock: %s", p)
	}
}

// TestEmbedded: one `norn server` on the embedded store, killed with
// SIGKILL and restarted again and again under the same load and checker.
func TestEmbedded(tt *testing.T) {
	tt.Parallel()
	t := loudT(tt)
	length := soak(t)
	const lease = 2 * time.Second
	n := StartNode(t, "embedded", "--store", "embedded:"+t.TempDir())
	var faults []Fault
	for range 5 {
		faults = append(faults, Fault{Name: "kill", Inject: func(context.Context) (func() error, string, error) {
			n.Kill()
			return n.Start, n.Name, nil
		}, Recovered: func(ctx context.Context) error { return answers(ctx, n.C) }})
	}
	nm := &Nemesis{Quiet: 2 * time.Second, Hold: map[string]time.Duration{"kill": 300 * time.Millisecond}}
	run(t, []*Node{n}, lease, faults, nm, length, nil, false)
}
