// Package clustertest runs Norn in cluster mode with real processes: the
// norn binary is built once, several `norn server --store postgres://…`
// nodes share one private PostgreSQL cluster, and HTTP workers spread over
// the nodes while a node is killed or PostgreSQL restarts under load.
package clustertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	code := m.Run()
	nornbin.Remove()
	os.Exit(code)
}

// node is one `norn server` process.
type node struct {
	t    *testing.T
	name string
	cmd  *exec.Cmd
	url  string
	c    *client.Client
	done chan struct{} // closed when the process exited
	mu   sync.Mutex
	log  strings.Builder
}

var listening = regexp.MustCompile(`listening on (https?://\S+)`)

func startNode(t *testing.T, bin, name, dbURL, schema string) *node {
	t.Helper()
	cmd := exec.Command(bin, "server", "--store", dbURL, "--schema", schema, "--migrate",
		"--addr", "127.0.0.1:0", "--log-level", "warn")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	n := &node{t: t, name: name, cmd: cmd, done: make(chan struct{})}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			n.mu.Lock()
			n.log.WriteString(line + "\n")
			n.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				select {
				case urlc <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(n.done)
	}()
	t.Cleanup(func() {
		n.kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, n.output())
		}
	})
	select {
	case n.url = <-urlc:
	case <-n.done:
		t.Fatalf("%s exited during start-up:\n%s", name, n.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not report its address within a minute:\n%s", name, n.output())
	}
	c, err := client.New(n.url)
	if err != nil {
		t.Fatal(err)
	}
	n.c = c
	return n
}

func (n *node) output() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.log.String()
}

func (n *node) kill() {
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
}

func (n *node) alive() bool {
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// startNodes starts k nodes on one schema (they migrate it concurrently).
func startNodes(t *testing.T, k int, dbURL, schema string) []*node {
	bin := nornbin.Path(t)
	nodes := make([]*node, k)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i] = startNode(t, bin, fmt.Sprintf("node%d", i), dbURL, schema)
		}()
	}
	wg.Wait()
	for _, n := range nodes {
		if n == nil {
			t.FailNow()
		}
	}
	return nodes
}

// pool is the workers' view of the cluster: each worker starts on a home
// node and moves to the next live one when its node stops answering.
type pool struct {
	nodes []*node
	dead  sync.Map // node name → true once killed by the test
}

func (p *pool) next(i int) int {
	for k := 1; k <= len(p.nodes); k++ {
		j := (i + k) % len(p.nodes)
		if _, dead := p.dead.Load(p.nodes[j].name); !dead {
			return j
		}
	}
	return i
}

// workStats counts what the workers saw.
type workStats struct {
	completed   atomic.Int64 // completions the servers acknowledged
	leaseLost   atomic.Int64
	unavailable atomic.Int64
	mu          sync.Mutex
	other       []error // anything else: a failure
	acked       map[string]bool
}

func (ws *workStats) fail(err error) {
	ws.mu.Lock()
	if len(ws.other) < 20 {
		ws.other = append(ws.other, err)
	}
	ws.mu.Unlock()
}

// worker claims up to batch tasks with a long poll and completes them with
// one LeaseBatch, until ctx ends.
func worker(ctx context.Context, p *pool, home int, name string, batch int, ws *workStats) {
	at := home
	for ctx.Err() == nil {
		c := p.nodes[at].c
		ts, err := c.Claim(ctx, norn.ClaimRequest{Worker: name, Queues: []string{"q"}, N: batch, Wait: norn.Duration(500 * time.Millisecond)})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, norn.ErrUnavailable) {
				ws.unavailable.Add(1)
				at = p.next(at)
				time.Sleep(20 * time.Millisecond)
				continue
			}
			ws.fail(fmt.Errorf("claim on %s: %w", p.nodes[at].name, err))
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if len(ts) == 0 {
			continue
		}
		ops := make([]norn.LeaseOp, len(ts))
		for i, tk := range ts {
			ops[i] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: tk.ID, Worker: name, Lease: tk.Lease}}
		}
		res, err := c.LeaseBatch(context.WithoutCancel(ctx), ops)
		if err != nil {
			// Unacknowledged: the leases run out and the tasks run again.
			if errors.Is(err, norn.ErrUnavailable) {
				ws.unavailable.Add(1)
				at = p.next(at)
				continue
			}
			ws.fail(fmt.Errorf("complete on %s: %w", p.nodes[at].name, err))
			continue
		}
		for i, r := range res {
			switch {
			case r.Err == nil:
				ws.completed.Add(1)
				if ws.acked != nil {
					ws.mu.Lock()
					ws.acked[ops[i].TaskID] = true
					ws.mu.Unlock()
				}
			case r.Err.Code == norn.CodeLeaseLost:
				ws.leaseLost.Add(1)
			default:
				ws.fail(fmt.Errorf("complete %s: %w", ops[i].TaskID, r.Err))
			}
		}
	}
}

func connect(t *testing.T, dbURL string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// waitFor waits until cond holds (an error ends the wait at once).
func waitFor(t *testing.T, what string, within time.Duration, cond func() (bool, error)) {
	t.Helper()
	await.Check(t, within, what, func() (string, error) {
		ok, err := cond()
		if ok || err != nil {
			return "", err
		}
		return "not reached", nil
	})
}

func count(ctx context.Context, conn *pgx.Conn, sql string, args ...any) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// TestKillNode: three nodes, workers spread over them, 20,000 tasks; one
// node is killed with SIGKILL mid-run. Every task ends completed, exactly
// once, and no lease was ever granted while another was still live.
func TestKillNode(t *testing.T) {
	ctx := context.Background()
	pg := pgtest.NewCluster(t)
	const schema = "kill"
	nodes := startNodes(t, 3, pg.URL(), schema)
	conn := connect(t, pg.URL())
	tbl := pgx.Identifier{schema}.Sanitize()

	const total, batch = 20_000, 1000
	for i := 0; i < total; i += batch {
		nts := make([]norn.NewTask, batch)
		for j := range nts {
			// A short lease: tasks held by the killed node's workers run
			// again soon after their lease runs out.
			nts[j] = norn.NewTask{Queue: "q", Spec: []byte(`{"n":1}`), Timeout: norn.Duration(3 * time.Second)}
		}
		if _, err := nodes[(i/batch)%3].c.Submit(ctx, nts...); err != nil {
			t.Fatalf("submit: %v", err)
		}
	}

	p := &pool{nodes: nodes}
	ws := &workStats{}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker(wctx, p, w%3, fmt.Sprintf("w%d", w), 50, ws)
		}()
	}
	defer func() { stop(); wg.Wait() }()

	done := func() (int64, error) {
		return count(ctx, conn, "SELECT count(*) FROM "+tbl+".tasks WHERE status = 'completed'")
	}
	waitFor(t, "a third of the tasks completed", 60*time.Second, func() (bool, error) {
		n, err := done()
		return n >= total/3, err
	})
	p.dead.Store(nodes[0].name, true)
	nodes[0].kill()
	t.Logf("killed %s after %d completions", nodes[0].name, ws.completed.Load())

	waitFor(t, "every task completed", 90*time.Second, func() (bool, error) {
		n, err := done()
		return n == total, err
	})
	stop()
	wg.Wait()
	t.Logf("acknowledged completions %d, lease lost %d, unavailable %d", ws.completed.Load(), ws.leaseLost.Load(), ws.unavailable.Load())
	for _, err := range ws.other {
		t.Errorf("worker error: %v", err)
	}
	if n, err := count(ctx, conn, "SELECT count(*) FROM "+tbl+".tasks"); err != nil || n != total {
		t.Fatalf("%d tasks in the table (%v), want %d", n, err, total)
	}
	if ws.completed.Load() > total {
		t.Errorf("%d completions acknowledged for %d tasks", ws.completed.Load(), total)
	}
	checkHistories(t, conn, tbl, total)
}

// checkHistories reads every task's history and checks the lease rules:
// leases only grow, a new assignment only follows the end of the previous
// lease (timeout, yield, retry), and exactly one TaskComplete ends the last
// lease.
func checkHistories(t *testing.T, conn *pgx.Conn, tbl string, total int) {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT task_id, type, coalesce(lease, 0) FROM "+tbl+".task_history ORDER BY task_id, seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type state struct {
		live      bool
		lease     int64
		completes int
	}
	tasks := map[string]*state{}
	bad := 0
	report := func(format string, args ...any) {
		bad++
		if bad <= 10 {
			t.Errorf(format, args...)
		}
	}
	reruns := 0
	for rows.Next() {
		var id, typ string
		var lease int64
		if err := rows.Scan(&id, &typ, &lease); err != nil {
			t.Fatal(err)
		}
		st := tasks[id]
		if st == nil {
			st = &state{}
			tasks[id] = st
		}
		switch norn.HistoryType(typ) {
		case norn.TaskAssignment:
			if st.live {
				report("task %s: lease %d granted while lease %d was live", id, lease, st.lease)
			}
			if lease <= st.lease {
				report("task %s: lease %d after lease %d", id, lease, st.lease)
			}
			if st.lease > 0 {
				reruns++
			}
			st.live, st.lease = true, lease
		case norn.TaskTimeout, norn.TaskYield, norn.TaskRetry:
			st.live = false
		case norn.TaskComplete:
			if !st.live || lease != st.lease {
				report("task %s: completed under lease %d, live lease %d (live %v)", id, lease, st.lease, st.live)
			}
			st.completes++
			st.live = false
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(tasks) != total {
		t.Errorf("%d tasks have a history, want %d", len(tasks), total)
	}
	for id, st := range tasks {
		if st.completes != 1 {
			report("task %s: %d TaskComplete entries", id, st.completes)
		}
	}
	t.Logf("histories of %d tasks checked; %d assignments were re-runs after a lease ran out", len(tasks), reruns)
}

// TestPostgresRestart: PostgreSQL restarts (immediate shutdown: like a
// crash) while clients submit and workers complete through three nodes.
// The nodes reconnect by themselves, every acknowledged submit and
// completion survives, and meanwhile clients only ever see 503
// unavailable from a running node.
func TestPostgresRestart(t *testing.T) {
	ctx := context.Background()
	pg := pgtest.NewCluster(t)
	const schema = "restart"
	nodes := startNodes(t, 3, pg.URL(), schema)
	tbl := pgx.Identifier{schema}.Sanitize()

	p := &pool{nodes: nodes}
	ws := &workStats{acked: map[string]bool{}}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var (
		mu        sync.Mutex
		submitted []string // acknowledged (2xx) submits
		seen503   atomic.Int64
		badErrs   []error
	)
	var lastOK [3]atomic.Int64 // unix nanos of each node's last successful submit
	for s := 0; s < 3; s++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := nodes[s].c
			for lctx.Err() == nil {
				nts := make([]norn.NewTask, 20)
				for j := range nts {
					nts[j] = norn.NewTask{Queue: "q", Spec: []byte(`{}`), Timeout: norn.Duration(3 * time.Second)}
				}
				rctx, cancel := context.WithTimeout(lctx, 10*time.Second)
				res, err := c.Submit(rctx, nts...)
				cancel()
				if err != nil {
					if lctx.Err() != nil {
						return
					}
					var ne *norn.Error
					mu.Lock()
					switch {
					case errors.As(err, &ne) && ne.Code == norn.CodeUnavailable && ne.Err == nil:
						seen503.Add(1) // the server answered 503 unavailable
					default:
						badErrs = append(badErrs, fmt.Errorf("submit on %s: %w", nodes[s].name, err))
					}
					mu.Unlock()
					time.Sleep(50 * time.Millisecond)
					continue
				}
				lastOK[s].Store(time.Now().UnixNano())
				mu.Lock()
				for _, r := range res {
					submitted = append(submitted, r.Task.ID)
				}
				mu.Unlock()
			}
		}()
	}
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker(lctx, p, w%3, fmt.Sprintf("w%d", w), 20, ws)
		}()
	}
	defer func() { stop(); wg.Wait() }()

	waitFor(t, "load running", 30*time.Second, func() (bool, error) {
		return ws.completed.Load() > 200, nil
	})
	if err := pg.Restart("immediate"); err != nil {
		t.Fatalf("restart: %v", err)
	}
	restarted := time.Now().UnixNano()
	t.Logf("PostgreSQL restarted")
	waitFor(t, "every node submitting again", 60*time.Second, func() (bool, error) {
		for i := range lastOK {
			if lastOK[i].Load() < restarted {
				return false, nil
			}
		}
		return true, nil
	})
	completedBefore := ws.completed.Load()
	waitFor(t, "workers completing again", 30*time.Second, func() (bool, error) {
		return ws.completed.Load() > completedBefore+100, nil
	})
	stop()
	wg.Wait()

	for i, n := range nodes {
		if !n.alive() {
			t.Errorf("node %d exited:\n%s", i, n.output())
		}
	}
	for _, err := range badErrs {
		t.Errorf("client saw something other than 503 unavailable: %v", err)
	}
	for _, err := range ws.other {
		t.Errorf("worker error: %v", err)
	}
	t.Logf("acknowledged submits %d, 503s %d, completions %d, worker unavailable %d",
		len(submitted), seen503.Load(), ws.completed.Load(), ws.unavailable.Load())

	conn := connect(t, pg.URL())
	n, err := count(ctx, conn, "SELECT count(*) FROM "+tbl+".tasks WHERE id = ANY($1)", submitted)
	if err != nil || n != int64(len(submitted)) {
		t.Fatalf("%d of %d acknowledged submits exist (%v)", n, len(submitted), err)
	}
	acked := make([]string, 0, len(ws.acked))
	for id := range ws.acked {
		acked = append(acked, id)
	}
	n, err = count(ctx, conn, "SELECT count(*) FROM "+tbl+".tasks WHERE id = ANY($1) AND status = 'completed'", acked)
	if err != nil || n != int64(len(acked)) {
		t.Fatalf("%d of %d acknowledged completions are completed (%v)", n, len(acked), err)
	}
}
