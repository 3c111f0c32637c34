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
