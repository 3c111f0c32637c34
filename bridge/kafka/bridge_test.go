package kafka

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRoundTrip sends messages with delays from "already late" to 5s,
// including binary and empty values, null keys and extra headers, and checks
// every one comes out once, intact, not before its deadline (less the
// timing advance) and without the Chronos headers.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	kc := startCluster(t, false)
	st := newStore(t)
	out := collect(t, kc)
	cfg := testConfig(kc)
	n := startNode(t, cfg, st, hooks{})
	cfg = cfg.withDefaults()

	base := time.Now()
	delays := []time.Duration{-time.Hour, -time.Second, 0, 10 * time.Millisecond, 5 * time.Second, 3 * time.Second}
	for i := 0; i < 40; i++ {
		delays = append(delays, time.Duration(i%10)*100*time.Millisecond)
	}
	var msgs []msg
	var ids []string
	for i, d := range delays {
		m := msg{id: fmt.Sprintf("rt-%d", i), deadline: rfc(base.Add(d)), value: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			key: []byte(fmt.Sprintf("k%d", i%4))}
		switch i % 5 {
		case 1:
			m.value = []byte{0, 0xff, 0xfe, '\n', 0x80} // not JSON, not UTF-8
		case 2:
			m.key, m.value = nil, nil
		case 3:
			m.value = []byte{}
			m.headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "bin", Value: []byte{0, 1, 2}}}
		}
		msgs = append(msgs, m)
		ids = append(ids, m.id)
	}
	produce(t, kc, msgs...)
	out.waitAll(t, ids, 30*time.Second)

	for i, m := range msgs {
		got := out.get(m.id)
		if len(got) != 1 {
			t.Errorf("%s: arrived %d times, want once", m.id, len(got))
			continue
		}
		r := got[0].rec
		dl := base.Add(delays[i])
		// Adaptive advance: at most half the claim-ahead time (in practice
		// the publish latency, about a millisecond).
		if got[0].at.Before(dl.Add(-cfg.ClaimAhead/2 - 5*time.Millisecond)) {
			t.Errorf("%s: arrived %s before its deadline", m.id, dl.Sub(got[0].at))
		}
		if !bytes.Equal(r.Value, m.value) || (r.Value == nil) != (m.value == nil) {
			t.Errorf("%s: value %q, want %q", m.id, r.Value, m.value)
		}
		if !bytes.Equal(r.Key, m.key) || (r.Key == nil) != (m.key == nil) {
			t.Errorf("%s: key %q, want %q", m.id, r.Key, m.key)
		}
		want := append(append([]kgo.RecordHeader(nil), m.headers...), kgo.RecordHeader{Key: testIDHeader, Value: []byte(m.id)})
		if len(r.Headers) != len(want) {
			t.Errorf("%s: headers %v, want %v", m.id, r.Headers, want)
			continue
		}
		for j := range want {
			if r.Headers[j].Key != want[j].Key || !bytes.Equal(r.Headers[j].Value, want[j].Value) {
				t.Errorf("%s: header %d = %v, want %v", m.id, j, r.Headers[j], want[j])
			}
		}
	}
	// The output consumer can see a message before the bridge's producer
	// has its acknowledgement (and counts it fired).
	waitFor(t, 5*time.Second, func() string {
		if s := n.b.Stats(); s.Fired+s.FiredImmediately != int64(len(msgs)) {
			return fmt.Sprintf("stats %+v, want %d fired", s, len(msgs))
		}
		return ""
	})
	s := n.b.Stats()
	if s.Consumed != int64(len(msgs)) || s.Invalid != 0 || s.Duplicates != 0 {
		t.Errorf("stats %+v, want %d consumed, none invalid or duplicate", s, len(msgs))
	}
	if s.FiredImmediately < 2 {
		t.Errorf("FiredImmediately = %d, want at least the 2 late messages", s.FiredImmediately)
	}
	if s.Stored+s.FiredImmediately != int64(len(msgs)) || s.Stored != s.Fired {
		t.Errorf("stats %+v: every message is stored or fired at once, every stored one fired", s)
	}
	waitFor(t, 5*time.Second, func() string {
		if c := countTasks(t, st, cfg); c != 0 {
			return fmt.Sprintf("%d fired messages still in the store", c)
		}
		return ""
	})
}

// TestDuplicates: a second message with a pending id is ignored, whether it
// is due later or at once; once fired the id is forgotten and may be used again.
func TestDuplicates(t *testing.T) {
	t.Parallel()
	kc := startCluster(t, false)
	st := newStore(t)
	out := collect(t, kc)
	n := startNode(t, testConfig(kc), st, hooks{})
	base := warmUp(t, kc, out, n)

	dl := rfc(time.Now().Add(4 * time.Second)) // still pending when the later copies come, even on a loaded machine
	produce(t, kc,
		msg{id: "dup", deadline: dl, value: []byte("first")},
		msg{id: "dup", deadline: dl, value: []byte("second, same poll")},
	)
	waitFor(t, 10*time.Second, func() string {
		if n.b.Stats().Stored-base != 1 || n.b.Stats().Duplicates != 1 {
			return fmt.Sprintf("stats %+v", n.b.Stats())
		}
		return ""
	})
	produce(t, kc,
		msg{id: "dup", deadline: dl, value: []byte("third, later poll")},
		msg{id: "dup", deadline: rfc(time.Now().Add(-time.Minute)), value: []byte("fourth, late")},
	)
	out.waitAll(t, []string{"dup"}, 10*time.Second)
	waitFor(t, 10*time.Second, func() string {
		if s := n.b.Stats(); s.Duplicates != 3 {
			return fmt.Sprintf("stats %+v, want 3 duplicates", s)
		}
		return ""
	})
	// Fired: forgotten, so the id is scheduled again.
	waitFor(t, 5*time.Second, func() string {
		if c := countTasks(t, st, testConfig(kc)); c != 0 {
			return fmt.Sprintf("%d tasks left", c)
		}
		return ""
	})
	produce(t, kc, msg{id: "dup", deadline: rfc(time.Now().Add(200 * time.Millisecond)), value: []byte("again")})
	waitFor(t, 10*time.Second, func() string {
		if got := out.get("dup"); len(got) != 2 {
			return fmt.Sprintf("dup arrived %d times, want 2", len(got))
		}
		return ""
	})
	got := out.get("dup")
	if string(got[0].rec.Value) != "first" || string(got[1].rec.Value) != "again" {
		t.Errorf("values %q, %q; want first, again", got[0].rec.Value, got[1].rec.Value)
	}
	// Nothing else arrives afterwards.
	time.Sleep(300 * time.Millisecond)
	if got := out.get("dup"); len(got) != 2 {
		t.Errorf("dup arrived %d times, want 2", len(got))
	}
}

// TestMalformedHeaders: bad messages are skipped and counted, and the
// messages behind them on the same partition still flow.
func TestMalformedHeaders(t *testing.T) {
	t.Parallel()
	kc := startCluster(t, false)
	st := newStore(t)
	out := collect(t, kc)
	n := startNode(t, testConfig(kc), st, hooks{})

	soon := rfc(time.Now().Add(100 * time.Millisecond))
	bad := []msg{
		{id: "bad-noid", deadline: soon, noID: true},
		{id: "bad-nodl", noDL: true},
		{id: "bad-dl", deadline: "tomorrow"},
		{id: "bad-dl2", deadline: "2022-13-01T11:09:01"},
		{id: "", deadline: soon},
	}
	good := []msg{
		{id: "good-1", deadline: soon},
		{id: "good-2", deadline: "2022-12-01T11:09:01.123"}, // Chronos' own example: no zone, long past
		{id: "good-3", deadline: time.Now().Add(200 * time.Millisecond).Format("2006-01-02T15:04:05.999999-07:00")},
	}
	// One key → one partition: the good messages sit behind the bad ones.
	var all []msg
	for _, m := range append(bad, good...) {
		m.key = []byte("same")
		all = append(all, m)
	}
	produce(t, kc, all...)
	out.waitAll(t, []string{"good-1", "good-2", "good-3"}, 10*time.Second)
	waitFor(t, 5*time.Second, func() string {
		if s := n.b.Stats(); s.Invalid != int64(len(bad)) || s.Consumed != int64(len(all)) {
			return fmt.Sprintf("stats %+v, want %d invalid of %d", s, len(bad), len(all))
		}
		return ""
	})
	for _, m := range bad {
		if m.id != "" && len(out.get(m.id)) > 0 {
			t.Errorf("malformed message %s was published", m.id)
		}
	}
}

// TestTakeOver: a node dies holding due messages — before publishing them,
// or after publishing but before deleting them. Another node takes them
// over once the hold time passes: every message arrives, and only the ones
// the dead node had published arrive twice.
func TestTakeOver(t *testing.T) {
	t.Parallel()
	for _, afterPublish := range []bool{false, true} {
		t.Run(fmt.Sprintf("afterPublish=%v", afterPublish), func(t *testing.T) {
			t.Parallel()
			kc := startCluster(t, false)
			st := newStore(t)
			out := collect(t, kc)
			cfg := testConfig(kc)

			held := make(chan []string, 100)
			var leaseEnds sync.Map // task id → end of A's hold
			die := func(ts []*norn.Task) bool {
				if isWarmUp(ts) {
					return true
				}
				for _, tk := range ts {
					leaseEnds.Store(tk.ID, tk.Deadline)
				}
				ids := make([]string, len(ts))
				for i, tk := range ts {
					ids[i] = tk.ID
				}
				held <- ids
				return false // the node "dies" holding them
			}
			h := hooks{beforePublish: die}
			if afterPublish {
				h = hooks{beforeComplete: die}
			}
			a := startNode(t, cfg, st, h)
			warmUp(t, kc, out, a)
			var ids []string
			var msgs []msg
			dl := time.Now().Add(2 * time.Second) // claimed through the store even on a loaded machine
			for i := 0; i < 20; i++ {
				id := fmt.Sprintf("to-%d", i)
				ids = append(ids, id)
				msgs = append(msgs, msg{id: id, deadline: rfc(dl), value: []byte(id)})
			}
			produce(t, kc, msgs...)
			// Wait until node A holds everything, then kill it.
			heldIDs := map[string]bool{}
			waitFor(t, 15*time.Second, func() string {
				for {
					select {
					case ids := <-held:
						for _, id := range ids {
							heldIDs[id] = true
						}
						continue
					default:
					}
					break
				}
				if len(heldIDs) < len(ids) {
					return fmt.Sprintf("node A holds %d of %d", len(heldIDs), len(ids))
				}
				return ""
			})
			a.stop()

			b := startNode(t, cfg, st, hooks{})
			want := 1
			if afterPublish {
				want = 2 // published by A, then again by B
			}
			waitFor(t, 20*time.Second, func() string {
				for _, id := range ids {
					if got := len(out.get(id)); got < want {
						return fmt.Sprintf("%s arrived %d times", id, got)
					}
				}
				return ""
			})
			time.Sleep(200 * time.Millisecond) // would anything arrive a third time?
			for _, id := range ids {
				got := out.get(id)
				if len(got) > 0 && afterPublish {
					got = got[1:] // A's own publish
				}
				end, ok := leaseEnds.Load(TaskID(DefaultQueue, id))
				if !ok {
					t.Fatalf("no hold recorded for %s", id)
				}
				holdEnd, _ := end.(time.Time)
				if len(got) > 0 && got[0].at.Before(holdEnd) {
					t.Errorf("%s taken over %s before the hold time ended", id, holdEnd.Sub(got[0].at))
				}
				if got := len(out.get(id)); got != want {
					t.Errorf("%s arrived %d times, want %d", id, got, want)
				}
			}
			// At least: on a loaded machine B's own hold can expire before
			// its publication went out (then it fails and B takes the
			// message over from itself).
			if s := b.b.Stats(); s.TakenOver < int64(len(ids)) {
				t.Errorf("node B took over %d, want %d", s.TakenOver, len(ids))
			}
		})
	}
}

// TestKafkaOutage: Kafka disappears for a while (messages fall due and
// new ones cannot be consumed), then comes back on the same address: every
// message arrives without anyone restarting the bridge.
func TestKafkaOutage(t *testing.T) {
	t.Parallel()
	kc := startCluster(t, true)
	st := newStore(t)
	out := collect(t, kc)
	cfg := testConfig(kc)
	n := startNode(t, cfg, st, hooks{})
	base := warmUp(t, kc, out, n)

	var first []msg
	var ids []string
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("before-%d", i)
		// Due while Kafka is down.
		first = append(first, msg{id: id, deadline: rfc(time.Now().Add(2500 * time.Millisecond)), value: []byte(id)})
		ids = append(ids, id)
	}
	produce(t, kc, first...)
	waitFor(t, 10*time.Second, func() string {
		if s := n.b.Stats(); s.Stored-base != int64(len(first)) {
			return fmt.Sprintf("stored %d of %d", s.Stored-base, len(first))
		}
		return ""
	})
	kc.stop()
	hctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	if err := n.b.Healthy(hctx); err == nil {
		t.Errorf("Healthy = nil while Kafka is down")
	}
	cancel()
	time.Sleep(3 * time.Second) // past the first messages' deadlines
	kc.restart()

	var second []msg
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("after-%d", i)
		second = append(second, msg{id: id, deadline: rfc(time.Now().Add(300 * time.Millisecond)), value: []byte(id)})
		ids = append(ids, id)
	}
	produce(t, kc, second...)
	out.waitAll(t, ids, 30*time.Second)
	hctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.b.Healthy(hctx); err != nil {
		t.Errorf("Healthy after Kafka came back: %v", err)
	}
}

// TestRestart: a bridge stopped with messages still delayed is replaced by
// a new one: the stored messages fire, and the committed offsets keep the
// input from being consumed twice.
func TestRestart(t *testing.T) {
	t.Parallel()
	kc := startCluster(t, false)
	st := newStore(t)
	out := collect(t, kc)
	cfg := testConfig(kc)
	a := startNode(t, cfg, st, hooks{})
	base := warmUp(t, kc, out, a)
	var ids []string
	var msgs []msg
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("rs-%d", i)
		ids = append(ids, id)
		msgs = append(msgs, msg{id: id, deadline: rfc(time.Now().Add(3 * time.Second)), value: []byte(id)})
	}
	produce(t, kc, msgs...)
	waitFor(t, 10*time.Second, func() string {
		if s := a.b.Stats(); s.Stored-base != int64(len(msgs)) {
			return fmt.Sprintf("stored %d of %d", s.Stored-base, len(msgs))
		}
		return ""
	})
	a.stop()
	if c := out.n.Load(); c != 1 {
		t.Fatalf("%d messages besides the warm-up fired before their deadline", c-1)
	}

	b := startNode(t, cfg, st, hooks{})
	produce(t, kc, msg{id: "rs-late", deadline: rfc(time.Now().Add(100 * time.Millisecond))})
	ids = append(ids, "rs-late")
	out.waitAll(t, ids, 15*time.Second)
	for _, id := range ids {
		if got := len(out.get(id)); got != 1 {
			t.Errorf("%s arrived %d times, want 1", id, got)
		}
	}
	if s := b.b.Stats(); s.Consumed != 1 || s.Duplicates != 0 {
		t.Errorf("restarted node stats %+v: want only the one new message consumed", s)
	}
}

// TestStoreOutage: while the store is down nothing is committed or lost;
// consumption and firing resume by themselves when it is back.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	kc := startCluster(t, false)
	st := newMemStore()
	out := collect(t, kc)
	n := startNode(t, testConfig(kc), st, hooks{})
	produce(t, kc, msg{id: "so-0", deadline: rfc(time.Now().Add(100 * time.Millisecond))})
	out.waitAll(t, []string{"so-0"}, 10*time.Second)

	st.down.Store(true)
	var ids []string
	var msgs []msg
	for i := 1; i <= 10; i++ {
		id := fmt.Sprintf("so-%d", i)
		ids = append(ids, id)
		msgs = append(msgs, msg{id: id, deadline: rfc(time.Now().Add(300 * time.Millisecond))})
	}
	produce(t, kc, msgs...)
	waitFor(t, 10*time.Second, func() string {
		if s := n.b.Stats(); s.Consumed < 11 {
			return fmt.Sprintf("consumed %d", s.Consumed)
		}
		return ""
	})
	time.Sleep(500 * time.Millisecond)
	if c := out.n.Load(); c != 1 {
		t.Errorf("%d messages out while the store was down, want 1", c)
	}
	st.down.Store(false)
	out.waitAll(t, ids, 20*time.Second)
}

// TestHealthy checks the readiness probe against a live cluster.
func TestHealthy(t *testing.T) {
	t.Parallel()
	kc := startCluster(t, false)
	b, err := New(testConfig(kc), newMemStore())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Healthy(ctx); err != nil {
		t.Fatalf("Healthy: %v", err)
	}
}
