package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// AutoctlAdvice is the message of a test that finds no pg_autoctl.
const AutoctlAdvice = "pg_autoctl (pg_auto_failover) not found on PATH; " +
	"install it (Debian/Ubuntu: apt-get install postgresql-15-auto-failover, for the installed PostgreSQL major version)"

// AutoctlPath returns the pg_autoctl executable, or an error saying how to
// install it.
func AutoctlPath() (string, error) {
	p, err := exec.LookPath("pg_autoctl")
	if err != nil {
		return "", errors.New(AutoctlAdvice)
	}
	return p, nil
}

// AutoFailover is a pg_auto_failover formation run by a test: a monitor
// and two PostgreSQL nodes, each under its own pg_autoctl keeper, with
// the second node a synchronous standby of the first. The tool, not the
// test, promotes the standby when the primary dies.
type AutoFailover struct {
	autoctl, bin string
	cred         *syscall.Credential
	dir          string
	monitor      *keeper
	nodes        []*keeper
}

// A keeper is one `pg_autoctl … --run` process and the PostgreSQL it runs.
type keeper struct {
	name, home, pgdata string
	port               int
	cmd                *exec.Cmd
	done               chan struct{}
	log                string

	mu     sync.Mutex
	killed bool
}

// AutoFailoverTimeouts are the monitor's settings that decide how long a
// failover takes (pgautofailover.*, in milliseconds) and the keepers'
// network_partition_timeout (seconds), which must stay below
// primary_demote_timeout so that an isolated primary stops before its
// standby is promoted.
type AutoFailoverTimeouts struct {
	Monitor          map[string]int
	NetworkPartition int
}

// FastFailover shortens pg_auto_failover's defaults (a failover in about
// 50 s) to a test's scale: a node that fails its checks for 3 s is
// failed over, and the promotion waits 8 s for the old primary to stop.
var FastFailover = AutoFailoverTimeouts{
	Monitor: map[string]int{
		"health_check_period":               1000,
		"health_check_timeout":              1000,
		"health_check_max_retries":          1,
		"health_check_retry_delay":          500,
		"node_considered_unhealthy_timeout": 3000,
		"primary_demote_timeout":            8000,
	},
	NetworkPartition: 5,
}

// NewAutoFailover starts a formation with the given timeouts (nil: the
// tool's defaults) and waits until node 0 is the primary and node 1 its
// secondary. Everything is stopped and removed when t ends. It fails t
// when pg_autoctl is missing; call AutoctlPath first to skip instead.
func NewAutoFailover(t testing.TB, timeouts *AutoFailoverTimeouts) *AutoFailover {
	t.Helper()
	autoctl, err := AutoctlPath()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := findBin()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := credential()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "norn-pgtest-paf-")
	if err != nil {
		t.Fatal(err)
	}
	f := &AutoFailover{autoctl: autoctl, bin: bin, cred: cred, dir: dir}
	t.Cleanup(f.shutdown)
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	f.monitor, err = f.start("monitor", "create", "monitor")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := f.awaitMonitor(ctx, "", nil); err != nil {
		t.Fatalf("pg_auto_failover monitor: %v\n%s", err, f.Logs())
	}
	if timeouts != nil {
		if err := f.tuneMonitor(ctx, timeouts.Monitor); err != nil {
			t.Fatalf("pg_auto_failover monitor settings: %v", err)
		}
	}
	monitorURL := fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", f.monitor.port)
	// One node at a time: the first registered becomes the primary.
	for i, want := range []string{"single", "secondary"} {
		name := "node" + strconv.Itoa(i)
		k, err := f.start(name, "create", "postgres", "--monitor", monitorURL, "--name", name, "--dbname", "postgres")
		if err != nil {
			t.Fatal(err)
		}
		f.nodes = append(f.nodes, k)
		if err := f.awaitMonitor(ctx, name, func(reported, goal string) bool { return reported == want && goal == want }); err != nil {
			t.Fatalf("pg_auto_failover %s: %v\n%s", name, err, f.Logs())
		}
		if timeouts != nil && timeouts.NetworkPartition > 0 {
			if out, err := f.autoctlCmd(k, "config", "set", "--pgdata", k.pgdata,
				"timeout.network_partition_timeout", strconv.Itoa(timeouts.NetworkPartition)).CombinedOutput(); err != nil {
				t.Fatalf("pg_autoctl config set on %s: %v\n%s", name, err, out)
			}
		}
	}
	if err := f.awaitMonitor(ctx, "node0", func(reported, goal string) bool { return reported == "primary" && goal == "primary" }); err != nil {
		t.Fatalf("pg_auto_failover: node0 not the primary: %v\n%s", err, f.Logs())
	}
	return f
}

// Ports returns the nodes' PostgreSQL ports, node 0 (the first primary) first.
func (f *AutoFailover) Ports() []int {
	out := make([]int, len(f.nodes))
	for i, k := range f.nodes {
		out[i] = k.port
	}
	return out
}

// URL returns the URL of node i's "postgres" database.
func (f *AutoFailover) URL(i int) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", f.nodes[i].port)
}

func (f *AutoFailover) autoctlCmd(k *keeper, args ...string) *exec.Cmd {
	cmd := exec.Command(f.autoctl, args...)
	cmd.Dir = k.home
	// pg_autoctl keeps its configuration and state under XDG folders: one
	// set per node, so keepers on one machine do not share files.
	cmd.Env = append(os.Environ(), "HOME="+k.home, "XDG_CONFIG_HOME="+filepath.Join(k.home, "config"),
		"XDG_DATA_HOME="+filepath.Join(k.home, "data"), "XDG_RUNTIME_DIR="+filepath.Join(k.home, "run"),
		"PATH="+f.bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		// A keeper service that pg_autoctl restarts after a configuration
		// reload (config set sends SIGHUP) has been seen to connect with
		// libpq's defaults (/var/run/postgresql, port 5432) instead of its
		// node's: these make the defaults the node's own.
		"PGHOST=127.0.0.1", "PGPORT="+strconv.Itoa(k.port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: f.cred}
	return cmd
}

// start runs `pg_autoctl <args> … --run` for a new node in a process
// group of its own (its PostgreSQL joins it).
func (f *AutoFailover) start(name string, args ...string) (*keeper, error) {
	home := filepath.Join(f.dir, name)
	for _, d := range []string{home, filepath.Join(home, "run")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
		if f.cred != nil {
			if err := os.Chown(d, int(f.cred.Uid), int(f.cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	k := &keeper{name: name, home: home, pgdata: filepath.Join(home, "pgdata"), port: port,
		log: filepath.Join(home, "pg_autoctl.log"), done: make(chan struct{})}
	args = append(args, "--pgdata", k.pgdata, "--pgport", strconv.Itoa(port), "--pgctl", filepath.Join(f.bin, "pg_ctl"),
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run")
	cmd := f.autoctlCmd(k, args...)
	cmd.SysProcAttr.Setpgid = true
	// SIGQUIT is pg_autoctl's immediate stop: the keeper stops its
	// PostgreSQL too (and frees its shared memory) if the test binary dies.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	logf, err := os.OpenFile(k.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("pg_autoctl %s: %v", name, err)
	}
	k.cmd = cmd
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(k.done)
	}()
	return k, nil
}

func (f *AutoFailover) monitorConn(ctx context.Context) (*pgx.Conn, error) {
	return pgx.Connect(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable&connect_timeout=2", f.monitor.port))
}

// awaitMonitor waits until the monitor answers and, when node is set,
// until ok holds for its reported and assigned states.
func (f *AutoFailover) awaitMonitor(ctx context.Context, node string, ok func(reported, goal string) bool) error {
	var last error
	for {
		conn, err := f.monitorConn(ctx)
		if err == nil {
			var reported, goal string
			if node == "" {
				_, err = conn.Exec(ctx, "SELECT 1 FROM pgautofailover.formation")
			} else {
				err = conn.QueryRow(ctx, "SELECT reportedstate::text, goalstate::text FROM pgautofailover.node WHERE nodename = $1", node).Scan(&reported, &goal)
				if err == nil && !ok(reported, goal) {
					err = fmt.Errorf("state %s, assigned %s", reported, goal)
				}
			}
			conn.Close(context.Background())
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), last)
		case <-f.monitor.done:
			return errors.New("the monitor's pg_autoctl exited")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (f *AutoFailover) tuneMonitor(ctx context.Context, settings map[string]int) error {
	conn, err := f.monitorConn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for k, v := range settings {
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER SYSTEM SET pgautofailover.%s = %d", k, v)); err != nil {
			return err
		}
	}
	_, err = conn.Exec(ctx, "SELECT pg_reload_conf()")
	return err
}

// State is the monitor's view of the formation and the connection
// strings it gives applications (`pg_autoctl show state`, `show uri`),
// for a test's log.
func (f *AutoFailover) State() string {
	var b strings.Builder
	for _, what := range []string{"state", "uri"} {
		out, err := f.autoctlCmd(f.monitor, "show", what, "--pgdata", f.monitor.pgdata).CombinedOutput()
		if err != nil {
			fmt.Fprintf(&b, "pg_autoctl show %s: %v\n", what, err)
		}
		b.Write(out)
	}
	return b.String()
}

// Logs returns every keeper's output, for a failing test.
func (f *AutoFailover) Logs() string {
	var b strings.Builder
	for _, k := range append([]*keeper{f.monitor}, f.nodes...) {
		if k == nil {
			continue
		}
		out, _ := os.ReadFile(k.log)
		if len(out) > 8000 {
			out = append([]byte("…"), out[len(out)-8000:]...)
		}
		fmt.Fprintf(&b, "== %s\n%s\n", k.name, out)
	}
	return b.String()
}

// Kill makes node i's machine die: its keeper is killed (SIGKILL), so
// nothing restarts its PostgreSQL, which is stopped at once as by a crash
// (immediate shutdown: every connection closed, nothing checkpointed).
func (f *AutoFailover) Kill(i int) error {
	return f.nodes[i].kill()
}

func (k *keeper) kill() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.killed || k.cmd == nil {
		return nil
	}
	k.killed = true
	pgid := k.cmd.Process.Pid
	// Freeze the group first, so the keeper cannot restart PostgreSQL in
	// the moment between the two kills.
	if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	postmaster := 0
	if b, err := os.ReadFile(filepath.Join(k.pgdata, "postmaster.pid")); err == nil {
		postmaster, _ = strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	}
	for _, pid := range groupMembers(pgid) {
		if pid != postmaster {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	<-k.done
	if postmaster > 0 {
		_ = syscall.Kill(postmaster, syscall.SIGQUIT)
		_ = syscall.Kill(postmaster, syscall.SIGCONT)
		deadline := time.Now().Add(30 * time.Second)
		for syscall.Kill(postmaster, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if syscall.Kill(postmaster, 0) == nil {
			_ = syscall.Kill(postmaster, syscall.SIGKILL)
			return fmt.Errorf("pgtest: the PostgreSQL of %s did not stop within 30 s of SIGQUIT", k.name)
		}
	}
	return nil
}

// groupMembers lists the processes of process group pgid (from /proc).
func groupMembers(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 2 && fields[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

// AwaitWritable waits until node i accepts writes (the promotion is done)
// and returns the interval in which it began to: from the start of the
// last attempt that found it read-only or down to the first that found it
// writable.
func (f *AutoFailover) AwaitWritable(ctx context.Context, i int) (from, to time.Time, err error) {
	u := f.URL(i) + "&target_session_attrs=read-write&connect_timeout=2"
	var last error
	for {
		start := time.Now()
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, u)
		cancel()
		if err == nil {
			to = time.Now()
			conn.Close(context.Background())
			if from.IsZero() {
				from = start
			}
			return from, to, nil
		}
		from, last = start, err
		select {
		case <-ctx.Done():
			return time.Time{}, time.Time{}, fmt.Errorf("node%d not writable: %w (last: %v)", i, ctx.Err(), last)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (f *AutoFailover) shutdown() {
	for _, k := range append(append([]*keeper(nil), f.nodes...), f.monitor) {
		if k != nil {
			_ = k.kill()
		}
	}
	_ = os.RemoveAll(f.dir)
}
