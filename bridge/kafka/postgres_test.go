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

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPostgresTwoNodes runs the cluster deployment: two bridge nodes, each
// with its own connection to one Postgres store, in one consumer group.
// Node A dies after publishing the messages it claimed but before deleting
// them; node B fires its own share and takes A's over after the hold time.
// Every message arrives; exactly those A held arrive twice.
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

	var mu sync.Mutex
	heldByA := map[string]bool{}
	a := startNode(t, cfg, stA, hooks{beforeComplete: func(ts []*norn.Task) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, tk := range ts {
			m, err := decodeSpec(tk.Spec)
			if err != nil {
				t.Errorf("claimed task %s: %v", tk.ID, err)
				continue
			}
			heldByA[m.ID] = true
		}
		return false
	}})
	b := startNode(t, cfg, stB, hooks{})
	warmUp(t, kc, out)

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
	if s := b.b.Stats(); s.TakenOver != int64(len(heldByA)) {
		t.Errorf("node B took over %d, want %d (held by A)", s.TakenOver, len(heldByA))
	}
	t.Logf("node A held %d of %d; node B stats %+v", len(heldByA), len(ids), b.b.Stats())
}
