package kafka

import (
	"context"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/embedded"
)

// newStore returns the store the bridge tests run on: the embedded store
// in a fresh directory, with its own monitor running as in production.
func newStore(t testing.TB) norn.Store {
	t.Helper()
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir(), Logger: testLogger()})
	if err != nil {
		t.Fatalf("opening the embedded store: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// countTasks counts the tasks (of any status) left in the bridge's queue.
func countTasks(t *testing.T, st norn.Store, cfg Config) int64 {
	t.Helper()
	n, err := st.Count(context.Background(), norn.Filter{Queues: []string{cfg.withDefaults().Queue}})
	if err != nil {
		t.Fatalf("Count: %v", err)
	}
	return n
}
