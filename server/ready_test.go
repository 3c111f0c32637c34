package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nornq/norn"
)

// stoppedStore is a store that still reads but no longer writes, like the
// embedded store after a failed sync.
type stoppedStore struct {
	norn.Store
	err error
}

func (s stoppedStore) Ready(context.Context) error { return s.err }

func TestReadyzReportsStoppedWrites(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.Store = stoppedStore{Store: c.Store, err: norn.Unavailable(errors.New("sync: input/output error"))}
	})
	r := e.must(503, "GET", "/readyz", "")
	if !strings.Contains(string(r.body), "input/output error") {
		t.Fatalf("readyz body %s does not say why", r.body)
	}
	e.must(200, "GET", "/healthz", "")
}

// downStore is a store whose database does not answer, and that warns of
// asynchronous replication.
type downStore struct {
	norn.Store
	down bool
}

func (s downStore) Get(ctx context.Context, id string) (*norn.Task, error) {
	if s.down {
		return nil, norn.UnavailableBecause(norn.CauseUnreachable, errors.New("dial tcp 10.1.2.3:5432: i/o timeout"))
	}
	return s.Store.Get(ctx, id)
}

func (s downStore) ReplicationWarning() string { return "the primary replicates asynchronously" }

// TestUnavailableSaysWhyWithoutInternals: a 503 names its cause class and
// asks to retry; the database's address stays in the log; /readyz tells an
// admin, and only an admin, the whole error and the replication warning.
func TestUnavailableSaysWhyWithoutInternals(t *testing.T) {
	t.Parallel()
	tokens := []Token{{Token: "admin", Role: RoleAdmin}, {Token: "c", Role: RoleClient}}
	e := startServer(t, func(c *Config) { c.Store = downStore{Store: c.Store, down: true}; c.Tokens = tokens })
	r := e.must(503, "GET", "/v1/tasks/x", "", withToken("c"))
	body := string(r.body)
	if !strings.Contains(body, `"cause":"database_unreachable"`) || !strings.Contains(body, "does not answer") ||
		strings.Contains(body, "10.1.2.3") || r.header.Get("Retry-After") != "1" {
		t.Fatalf("503 body %s, Retry-After %q: want the cause class, no address, Retry-After 1", body, r.header.Get("Retry-After"))
	}
	r = e.must(503, "GET", "/readyz", "")
	if body := string(r.body); !strings.Contains(body, `"cause":"database_unreachable"`) || strings.Contains(body, "10.1.2.3") {
		t.Fatalf("anonymous /readyz body %s: want the cause, no address", body)
	}
	if r = e.must(503, "GET", "/readyz", "", withToken("admin")); !strings.Contains(string(r.body), "10.1.2.3") {
		t.Fatalf("admin /readyz body %s: want the whole error", r.body)
	}

	up := startServer(t, func(c *Config) { c.Store = downStore{Store: c.Store}; c.Tokens = tokens })
	if r := up.must(200, "GET", "/readyz", "", withToken("admin")); !strings.Contains(string(r.body), `"replication":"the primary replicates asynchronously"`) {
		t.Fatalf("admin /readyz body %s: want the replication warning", r.body)
	}
	for _, opt := range []reqOpt{withToken("c"), withHeader("X-None", "")} {
		if r := up.must(200, "GET", "/readyz", "", opt); strings.Contains(string(r.body), "replication") {
			t.Fatalf("non-admin /readyz body %s: want no details", r.body)
		}
	}
}

// TestBuildShown: an admin's /healthz names the build, and /metrics has
// norn_build_info; other callers' /healthz does not.
func TestBuildShown(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) { c.Tokens = []Token{{Token: "admin", Role: RoleAdmin}, {Token: "c", Role: RoleClient}} })
	if r := e.must(200, "GET", "/healthz", "", withToken("admin")); !strings.Contains(string(r.body), `"version":"`) {
		t.Fatalf("admin /healthz %s: want the version", r.body)
	}
	if r := e.must(200, "GET", "/healthz", ""); strings.Contains(string(r.body), "version") {
		t.Fatalf("anonymous /healthz %s: want no details", r.body)
	}
	if r := e.must(200, "GET", "/metrics", ""); !strings.Contains(string(r.body), "norn_build_info{") {
		t.Fatal("/metrics has no norn_build_info")
	}
}
