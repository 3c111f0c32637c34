// Package pgtest gives tests a throwaway PostgreSQL: one private cluster per
// test binary, started from the installed server binaries in a temporary
// directory on a free port, and a fresh schema per test so tests can run in
// parallel without seeing each other's tables.
//
// Set NORN_TEST_DATABASE_URL to use an existing database instead (each test
// still gets its own schema, dropped afterwards). Without it and without a
// PostgreSQL installation the tests fail, saying how to install one: a
// database test that silently skips proves nothing.
//
// Packages using the shared cluster call Main from TestMain so the cluster
// is stopped and its directory removed when the tests end:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the environment variable that points the tests at an
// existing database instead of a private cluster.
const EnvURL = "NORN_TEST_DATABASE_URL"

// installAdvice is the message of a test that finds no PostgreSQL.
const installAdvice = "PostgreSQL server binaries (initdb, postgres) not found on PATH or under /usr/lib/postgresql/*/bin; " +
	"install them (Debian/Ubuntu: apt-get install postgresql; macOS: brew install postgresql) " +
	"or set " + EnvURL + " to a database the tests may create schemas in"

var (
	sharedMu      sync.Mutex
	shared        *Cluster
	sharedErr     error
	schemaCounter int
)

// Main runs the tests of a package and then stops the shared cluster, if one
// was started, and removes its directory, then runs after (for a package's
// last words). Call it from TestMain.
func Main(m *testing.M, after ...func()) {
	code := m.Run()
	sharedMu.Lock()
	if shared != nil {
		shared.shutdown()
		shared = nil
	}
	sharedMu.Unlock()
	for _, f := range after {
		f()
	}
	os.Exit(code)
}

// URL returns the URL of a fresh, empty schema that is dropped when t ends.
// The URL sets search_path to the schema, so unqualified names land in it.
func URL(t testing.TB) string {
	u, _ := Schema(t)
	return u
}

// Schema is URL that also returns the schema's name, for code that qualifies
// its tables itself (the Postgres store's Config.Schema).
func Schema(t testing.TB) (dbURL, schema string) {
	t.Helper()
	base := baseURL(t)
	sharedMu.Lock()
	schemaCounter++
	n := schemaCounter
	sharedMu.Unlock()
	schema = fmt.Sprintf("t%d_%s", n, randHex(4))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := execOnce(ctx, base, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := execOnce(ctx, base, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Logf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	return WithSearchPath(base, schema), schema
}

// VacuumCount is how many times VACUUM statements (not autovacuum) have
// vacuumed schema's task table, as the statistics say.
func VacuumCount(t testing.TB, dbURL, schema string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(ctx)
	var n int64
	if err := conn.QueryRow(ctx, `SELECT vacuum_count FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'tasks'`,
		schema).Scan(&n); err != nil {
		t.Fatalf("pgtest: vacuum count of %s.tasks: %v", schema, err)
	}
	return n
}

// WithSearchPath returns dbURL with its search_path set to schema.
func WithSearchPath(dbURL, schema string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// baseURL returns the database URL of the override or the shared cluster,
// starting the cluster on first use.
func baseURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		shared, sharedErr = start()
	}
	if sharedErr != nil {
		t.Fatalf("pgtest: %v", sharedErr)
	}
	return shared.URL()
}

func execOnce(ctx context.Context, dbURL, sql string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Cluster is a private PostgreSQL server run by a test.
type Cluster struct {
	dir  string // temporary root: data/ and the socket live below it
	data string
	bin  string
	port int
	cred *syscall.Credential

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// NewCluster starts a cluster of its own for t (for tests that restart or
// stop the server, which must not disturb the shared one) and removes it
// when t ends. NORN_TEST_DATABASE_URL does not apply: restarting somebody
// else's database is not a test's business.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := start()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(c.shutdown)
	return c
}

// Standby starts a streaming standby of c (asynchronous unless c's
// synchronous_standby_names names it; its application_name is
// "standby"), removed when t ends.
func (c *Cluster) Standby(t testing.TB) *Cluster {
	t.Helper()
	dir, err := os.MkdirTemp("", "norn-pgtest-standby-")
	if err != nil {
		t.Fatal(err)
	}
	sb := &Cluster{dir: dir, data: filepath.Join(dir, "data"), bin: c.bin, cred: c.cred}
	t.Cleanup(sb.shutdown)
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	base := exec.Command(filepath.Join(c.bin, "pg_basebackup"), "-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "postgres",
		"-D", sb.data, "-R", "-X", "stream", "-d", "application_name=standby")
	base.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	base.Dir = dir
	if out, err := base.CombinedOutput(); err != nil {
		t.Fatalf("pg_basebackup: %v\n%s", err, out)
	}
	if sb.port, err = freePort(); err != nil {
		t.Fatal(err)
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if err := sb.startLocked(); err != nil {
		t.Fatalf("standby: %v", err)
	}
	return sb
}

// URL returns the connection URL of the cluster's "postgres" database over TCP.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Port returns the TCP port the cluster listens on.
func (c *Cluster) Port() int { return c.port }

// Stop shuts the server down. Mode is pg_ctl's: "smart", "fast" (default)
// or "immediate" (like a crash: no checkpoint, recovery on the next start).
func (c *Cluster) Stop(mode string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked(mode)
}

// Start starts a stopped server again on the same port and data directory.
func (c *Cluster) Start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd != nil {
		return errors.New("pgtest: cluster is already running")
	}
	return c.startLocked()
}

// Restart stops the server with mode and starts it again.
func (c *Cluster) Restart(mode string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stopLocked(mode); err != nil {
		return err
	}
	return c.startLocked()
}

func (c *Cluster) stopLocked(mode string) error {
	if c.cmd == nil {
		return nil
	}
	sig := syscall.SIGINT // fast
	switch mode {
	case "smart":
		sig = syscall.SIGTERM
	case "immediate":
		sig = syscall.SIGQUIT
	case "", "fast":
	default:
		return fmt.Errorf("pgtest: unknown stop mode %q", mode)
	}
	_ = c.cmd.Process.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	c.cmd = nil
	return nil
}

func (c *Cluster) shutdown() {
	c.mu.Lock()
	_ = c.stopLocked("immediate")
	c.mu.Unlock()
	_ = os.RemoveAll(c.dir)
}

// findBin locates a directory holding initdb and postgres.
func findBin() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if r, err := filepath.EvalSymlinks(p); err == nil {
			dir = filepath.Dir(r)
		}
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	for i := len(matches) - 1; i >= 0; i-- { // newest version first
		dir := filepath.Dir(matches[i])
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New(installAdvice)
}

// credential returns the account to run the server as: PostgreSQL refuses to
// run as root, so root hands the cluster to "postgres" or "nobody".
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 == nil && err2 == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
		}
	}
	return nil, errors.New("running as root and neither a \"postgres\" nor a \"nobody\" account exists to run PostgreSQL as")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func start() (*Cluster, error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "norn-pgtest-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, data: filepath.Join(dir, "data"), bin: bin, cred: cred}
	fail := func(err error) (*Cluster, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", c.data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	for attempt := 0; ; attempt++ {
		if c.port, err = freePort(); err != nil {
			return fail(err)
		}
		if err = c.startLocked(); err == nil {
			return c, nil
		}
		if attempt == 2 { // a port race with another process is retried; anything else is not
			return fail(err)
		}
	}
}

// startLocked runs the postmaster with fsync off (a process crash keeps the
// OS page cache, so immediate restarts still lose nothing committed, which
// is what tests need) and as a child (not daemonised by pg_ctl), so
// it dies with the test binary (Pdeathsig) even if cleanup never runs.
func (c *Cluster) startLocked() error {
	args := []string{"-D", c.data, "-p", strconv.Itoa(c.port), "-k", c.dir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=64MB",
		"-c", "log_min_messages=FATAL", "-c", "logging_collector=off"}
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	logf, err := os.OpenFile(filepath.Join(c.dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(done)
	}()
	c.cmd, c.done = cmd, done
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, c.URL())
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-done:
			c.cmd = nil
			log, _ := os.ReadFile(filepath.Join(c.dir, "postgres.log"))
			return fmt.Errorf("postgres exited during start-up: %s", strings.TrimSpace(string(log)))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			c.cmd = nil
			return fmt.Errorf("postgres did not accept connections within a minute: %v", err)
		}
	}
}

// Promote makes a standby the primary (pg_ctl promote) and waits until it
// accepts writes.
func (c *Cluster) Promote() error {
	cmd := exec.Command(filepath.Join(c.bin, "pg_ctl"), "promote", "-w", "-D", c.data)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	cmd.Dir = c.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl promote: %v\n%s", err, out)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		var recovery bool
		conn, err := pgx.Connect(ctx, c.URL())
		if err == nil {
			err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&recovery)
			conn.Close(context.Background())
		}
		cancel()
		if err == nil && !recovery {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the promoted standby does not accept writes after a minute: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
