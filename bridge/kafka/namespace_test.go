package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
	"github.com/nornq/norn/store/postgres"
	"github.com/twmb/franz-go/pkg/kgo"
)

// openPostgres opens a Postgres store on a fresh schema.
func openPostgres(t *testing.T) norn.Store {
	t.Helper()
	url, schema := pgtest.Schema(t)
	st, err := postgres.Open(context.Background(), postgres.Config{URL: url, Schema: schema, Migrate: true, Logger: testLogger()})
	if err != nil {
		t.Fatalf("opening postgres: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestApplicationTasksUntouched: the bridge runs on the same store as the
// application. Application tasks order-42 (ready), order-43 (cancelled) and
// order-44 (ready) live in queue emails; messages whose chronosMessageId are
// order-42, order-43 (delayed) and order-44 (already due) must all be
// delivered, and the application's tasks must stay exactly as they were. A
// task squatting on the bridge's own id of a message (order-45) makes that
// message be skipped as an id conflict, and is left alone too.
func TestApplicationTasksUntouched(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"embedded", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			var st norn.Store
			if kind == "postgres" {
				st = openPostgres(t)
			} else {
				st = newStore(t)
			}
			ctx := context.Background()
			app := []norn.NewTask{
				{ID: "order-42", Queue: "emails", Spec: json.RawMessage(`{"to":"ada"}`)},
				{ID: "order-43", Queue: "emails", Spec: json.RawMessage(`{"to":"grace"}`)},
				{ID: "order-44", Queue: "emails", Spec: json.RawMessage(`{"to":"alan"}`)},
				{ID: TaskID(DefaultQueue, "order-45"), Queue: "emails", Spec: json.RawMessage(`{"to":"squatter"}`)},
			}
			if _, err := st.Submit(ctx, app...); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Cancel(ctx, "order-43"); err != nil {
				t.Fatal(err)
			}
			before := map[string]*norn.Task{}
			for _, nt := range app {
				tk, err := st.Get(ctx, nt.ID)
				if err != nil {
					t.Fatal(err)
				}
				before[nt.ID] = tk
			}

			kc := startCluster(t, false)
			out := collect(t, kc)
			n := startNode(t, testConfig(kc), st, hooks{})
			warmUp(t, kc, out, n)
			soon := rfc(time.Now().Add(3 * time.Second)) // stored even when consuming is slow (loaded machine)
			produce(t, kc,
				msg{id: "order-42", deadline: soon, value: []byte("42")},
				msg{id: "order-43", deadline: soon, value: []byte("43")},
				msg{id: "order-44", deadline: rfc(time.Now().Add(-time.Second)), value: []byte("44")},
				msg{id: "order-45", deadline: soon, value: []byte("45")},
			)
			out.waitAll(t, []string{"order-42", "order-43", "order-44"}, 20*time.Second)
			waitFor(t, 10*time.Second, func() string {
				if s := n.b.Stats(); s.Consumed != 5 || s.Invalid != 1 {
					return fmt.Sprintf("stats %+v, want 5 consumed (with the warm-up) and the squatted id skipped", s)
				}
				return ""
			})
			time.Sleep(300 * time.Millisecond) // would anything arrive twice, or order-45 at all?
			for _, id := range []string{"order-42", "order-43", "order-44"} {
				if got := out.get(id); len(got) != 1 || string(got[0].rec.Value) != id[len("order-"):] {
					t.Errorf("message %s arrived %d times (%v), want once", id, len(got), got)
				}
			}
			if got := out.get("order-45"); len(got) != 0 {
				t.Errorf("message order-45, whose task id another queue holds, was published %d times", len(got))
			}
			if s := n.b.Stats(); s.Duplicates != 0 {
				t.Errorf("stats %+v: application tasks taken for duplicates", s)
			}
			for id, want := range before {
				got, err := st.Get(ctx, id)
				if err != nil {
					t.Errorf("application task %s: %v", id, err)
					continue
				}
				if got.Queue != want.Queue || got.Status != want.Status || got.Version != want.Version ||
					string(got.Spec) != string(want.Spec) || !got.Created.Equal(want.Created) {
					t.Errorf("application task %s changed: %s %s v%d %s, was %s %s v%d %s", id,
						got.Queue, got.Status, got.Version, got.Spec, want.Queue, want.Status, want.Version, want.Spec)
				}
			}
			waitFor(t, 10*time.Second, func() string {
				if c := countTasks(t, st, testConfig(kc)); c != 0 {
					return fmt.Sprintf("%d bridge tasks left", c)
				}
				return ""
			})
		})
	}
}

// TestLegacyTaskIDs: tasks stored by an earlier version of the bridge,
// whose id is the bare message id, are still fired when due and then
// deleted, so an upgrade with messages waiting loses none of them.
func TestLegacyTaskIDs(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := context.Background()
	kc := startCluster(t, false)
	out := collect(t, kc)
	cfg := testConfig(kc)
	zero := 0
	var legacy []norn.NewTask
	for i, id := range []string{"old-1", "~bb2xkIDI"} {
		mid := fmt.Sprintf("old-%d", i+1)
		m := &message{ID: mid, Deadline: time.Now().Add(500 * time.Millisecond), Value: []byte("v"),
			Headers: []kgo.RecordHeader{{Key: testIDHeader, Value: []byte(mid)}}}
		raw, err := encodeSpec(m, inTopic, 0, int64(i))
		if err != nil {
			t.Fatal(err)
		}
		legacy = append(legacy, norn.NewTask{ID: id, Queue: DefaultQueue, Spec: raw, RunAt: m.Deadline.Add(-50 * time.Millisecond),
			MaxAttempts: &zero, Timeout: norn.Duration(cfg.HoldTime)})
	}
	if _, err := st.Submit(ctx, legacy...); err != nil {
		t.Fatal(err)
	}
	startNode(t, cfg, st, hooks{})
	out.waitAll(t, []string{"old-1", "old-2"}, 15*time.Second)
	waitFor(t, 10*time.Second, func() string {
		if c := countTasks(t, st, cfg); c != 0 {
			return fmt.Sprintf("%d legacy tasks left", c)
		}
		return ""
	})
}
