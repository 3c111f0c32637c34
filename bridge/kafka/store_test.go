package kafkabridge

import (
	"context"
	"testing"

	"github.com/nornq/norn"
)

// newStore returns the store the bridge tests run on.
func newStore(t testing.TB) norn.Store {
	t.Helper()
	st := newMemStore()
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
