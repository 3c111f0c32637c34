package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
	"github.com/nornq/norn/store/postgres"
)

// pgTestMain runs the tests with a throwaway PostgreSQL (see TestMain in fault_test.go).
func pgTestMain(m *testing.M) { pgtest.Main(m) }

// TestPostgresTwoNodes runs the cluster deployment: two bridge nodes, each
// with its own connection to one Postgres store, in one consumer group.
// Node A dies after publishing its first claimed batch but before deleting
// it (and holds what it claims after that without publishing); node B
// fires its own share and takes A's over after the hold time. Every message
// arrives; exactly those A published arrive twice.
func TestPostgresTwoNodes(t *testing.T) {
	t.Parallel()
	url, schema := pgtest.Schema(t)
	open := func(migrate bool) norn.Store {
		st, err := postgres.Open(context.Background(), postgres.Config{URL: url, Schema: schema, Migrate: migrate, Logger: testLogger()})
		if err != nil {
			t.Fatalf("opening postgres: %v", err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	stA, stB := open(true), open(false)
	kc := startCluster(t, false)
	out := collect(t, kc)
	cfg := testConfig(kc)

	// Node A dies right after publishing its first batch, before completing
	// it: from then on it drops whatever it claims (it is dead, but its
	// claims still hold the messages until the hold time passes).
	var mu sync.Mutex
	heldByA := map[string]bool{} // published by A, never completed
	claimedDead := map[string]bool{}
	dead := false
	record := func(into map[string]bool, ts []*norn.Task) {
		for _, tk := range ts {
			m, err := decodeSpec(tk.Spec)
			if err != nil {
				t.Errorf("claimed task %s: %v", tk.ID, err)
				continue
			}
			into[m.ID] = true
		}
	}
	a := startNode(t, cfg, stA, hooks{
		beforePublish: func(ts []*norn.Task) bool {
			if isWarmUp(ts) {
				return true
			}
			mu.Lock()
			defer mu.Unlock()
			if dead {
				record(claimedDead, ts)
				return false
			}
			// A completes nothing it publishes (it dies at its first
			// completion), and with claim-ahead several publications can
			// be under way when it does: every message A published is
			// one it holds and B fires again.
			record(heldByA, ts)
			return true
		},
		beforeComplete: func(ts []*norn.Task) bool {
			if isWarmUp(ts) {
				return true
			}
			mu.Lock()
			defer mu.Unlock()
			dead = true
			return false
		},
	})
	b := startNode(t, cfg, stB, hooks{})
	warmUp(t, kc, out, b)

	var ids []string
	var msgs []msg
	for i := 0; i < 30; i++ {
		id := fmt.Sprintf("pg-%d", i)
		ids = append(ids, id)
		msgs = append(msgs, msg{id: id, deadline: rfc(time.Now().Add(time.Duration(i%6) * 200 * time.Millisecond)), value: []byte(id)})
	}
	produce(t, kc, msgs...)
	out.waitAll(t, ids, 30*time.Second)
	a.stop()
	waitFor(t, 30*time.Second, func() string {
		mu.Lock()
		defer mu.Unlock()
		for id := range heldByA {
			if n := len(out.get(id)); n < 2 {
				return fmt.Sprintf("%s (held by the dead node) arrived %d times, want 2", id, n)
			}
		}
		return ""
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		want := 1
		if heldByA[id] {
			want = 2
		}
		if n := len(out.get(id)); n != want {
			t.Errorf("%s arrived %d times, want %d", id, n, want)
		}
	}
	takenOver := map[string]bool{}
	for id := range heldByA {
		takenOver[id] = true
	}
	for id := range claimedDead {
		takenOver[id] = true
	}
	if s := b.b.Stats(); s.TakenOver < int64(len(takenOver)) {
		t.Errorf("node B took over %d, want %d (held by A)", s.TakenOver, len(takenOver))
	}
	t.Logf("node A published %d and held %d more of %d; node B stats %+v", len(heldByA), len(claimedDead), len(ids), b.b.Stats())
}
