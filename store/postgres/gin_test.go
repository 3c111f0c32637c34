package postgres

import (
	"context"
	"fmt"
	"testing"
)

// TestDependencyIndexesWithoutPendingList: the dependency indexes take no
// pending list, so the release probe that follows every completion stays
// an index lookup however many tasks wait (with GIN's pending list, 19,000
// blocked tasks made a probe of 1,000 ids read the whole list, 250 ms per
// completion batch instead of 1 ms).
func TestDependencyIndexesWithoutPendingList(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	for _, idx := range []string{"tasks_blocked_deps", "tasks_depends_on"} {
		var opts []string
		err := s.pool.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`, s.cfg.Schema, idx).Scan(&opts)
		if err != nil || fmt.Sprint(opts) != "[fastupdate=off]" {
			t.Fatalf("%s options %v (%v), want fastupdate=off", idx, opts, err)
		}
	}
}
