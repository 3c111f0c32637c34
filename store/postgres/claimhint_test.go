package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

func TestClaimHintRules(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	key := func(p int64, ready time.Duration, id string) claimHint {
		return claimHint{at: t0, priority: p, readyAt: t0.Add(ready), id: id}
	}
	genA, genB := make(chan struct{}), make(chan struct{})
	for _, c := range []struct {
		name    string
		set     []claimHint // set in this order, all during genA
		setGen  <-chan struct{}
		getGen  <-chan struct{}
		getAt   time.Time
		want    claimHint
		wantHit bool
	}{
		{"fresh hint is used", []claimHint{key(0, 1, "b")}, genA, genA, t0.Add(10 * time.Millisecond), key(0, 1, "b"), true},
		{"a wake-up since discards it", []claimHint{key(0, 1, "b")}, genA, genB, t0.Add(10 * time.Millisecond), claimHint{}, false},
		{"a claim during which a wake-up came sets nothing", []claimHint{key(0, 1, "b")}, genB, genA, t0, claimHint{}, false},
		{"too old", []claimHint{key(0, 1, "b")}, genA, genA, t0.Add(maxHintAge + time.Millisecond), claimHint{}, false},
		{"clock went back", []claimHint{key(0, 1, "b")}, genA, genA, t0.Add(-time.Millisecond), claimHint{}, false},
		{"only moves forward: later ready time", []claimHint{key(0, 2, "a"), key(0, 1, "z")}, genA, genA, t0, key(0, 2, "a"), true},
		{"only moves forward: lower priority is later", []claimHint{key(1, 5, "a"), key(5, 1, "a")}, genA, genA, t0, key(1, 5, "a"), true},
		{"only moves forward: id breaks ties", []claimHint{key(0, 1, "a"), key(0, 1, "b")}, genA, genA, t0, key(0, 1, "b"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h claimHints
			for _, k := range c.set {
				h.set("q", c.setGen, genA, k)
			}
			got, ok := h.get("q", c.getGen, c.getAt)
			if ok != c.wantHit {
				t.Fatalf("get: hit = %v, want %v", ok, c.wantHit)
			}
			if ok && (got.priority != c.want.priority || !got.readyAt.Equal(c.want.readyAt) || got.id != c.want.id) {
				t.Fatalf("get = %+v, want %+v", got, c.want)
			}
			if _, ok := h.get("other", c.getGen, c.getAt); ok {
				t.Fatal("a hint of another queue was returned")
			}
		})
	}
}

// TestClaimHintFollowsReadyTasks checks that claims keep claim order while
// they start at hints: a higher-priority task submitted by this store, or
// by another node (seen through the wake notification), comes first, and a
// task made ready again comes in its turn.
func TestClaimHintFollowsReadyTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	b, err := Open(ctx, Config{URL: a.cfg.URL, Schema: a.cfg.Schema, DisableMonitor: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	submit := func(s *Store, n int, prio uint32) {
		t.Helper()
		nts := make([]norn.NewTask, n)
		for i := range nts {
			nts[i] = norn.NewTask{Queue: "q", Priority: prio}
		}
		if _, err := s.Submit(ctx, nts...); err != nil {
			t.Fatal(err)
		}
	}
	claim := func(n int) []*norn.Task {
		t.Helper()
		got, err := a.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: n})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	hinted := func() bool {
		_, ok := a.hints.get("q", a.wake.wait(), time.Now())
		return ok
	}
	// A submit's own notification arrives after Submit returned and
	// discards the hint a claim set meanwhile: claim one at a time until a
	// hint stands.
	taken := 0
	until := func() {
		t.Helper()
		for i := 0; !hinted(); i++ {
			if i == 20 {
				t.Fatal("no claim hint after 20 claims")
			}
			if got := claim(1); len(got) != 1 || got[0].Priority != 1 {
				t.Fatalf("claimed %+v, want one task of priority 1", got)
			}
			taken++
		}
	}
	submit(a, 50, 1)
	until()
	first := claim(10)
	taken += len(first)
	// The next claim starts at the hint and continues in order (one
	// submit batch shares its ready time: claim order is id order).
	second := claim(10)
	taken += len(second)
	if len(first) != 10 || len(second) != 10 || second[0].ID <= first[9].ID {
		t.Fatalf("claims out of order: %d and %d tasks", len(first), len(second))
	}

	// A higher priority from this store comes first.
	submit(a, 1, 9)
	if got := claim(1); len(got) != 1 || got[0].Priority != 9 {
		t.Fatalf("after a local submit of priority 9: claimed %+v", got)
	}
	// A higher priority from another node comes first once its wake-up
	// has arrived.
	until()
	woken := a.wake.wait()
	submit(b, 1, 7)
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up from the other node's submit")
	}
	if got := claim(1); len(got) != 1 || got[0].Priority != 7 {
		t.Fatalf("after another node's submit of priority 7: claimed %+v", got)
	}
	// Lower priorities follow when the hint's priority runs out.
	submit(a, 3, 0)
	rest := claim(100)
	if want := 50 - taken + 3; len(rest) != want {
		t.Fatalf("claimed %d of the rest, want %d", len(rest), want)
	}
	for i, tk := range rest {
		want := uint32(1)
		if i >= len(rest)-3 {
			want = 0
		}
		if tk.Priority != want {
			t.Fatalf("task %d of the rest has priority %d, want %d", i, tk.Priority, want)
		}
	}
}

// The plain claim's statement returns its rows unsorted; the store puts
// them in tasks_claim's order, which callers and the claim hint (taken from
// the first row) rely on.
func TestSortClaimed(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := func(p uint32, ready time.Duration, id string) *rec {
		x := &rec{readyAt: t0.Add(ready)}
		x.Priority, x.ID = p, id
		return x
	}
	for _, c := range []struct {
		name string
		in   []*rec
		want []string
	}{
		{"empty", nil, nil},
		{"higher priority first", []*rec{r(0, 0, "a"), r(5, time.Second, "b"), r(1, 0, "c")}, []string{"b", "c", "a"}},
		{"then earlier ready time", []*rec{r(1, 2*time.Second, "a"), r(1, time.Second, "b"), r(1, 3*time.Second, "c")}, []string{"b", "a", "c"}},
		{"then id", []*rec{r(1, 0, "c"), r(1, 0, "a"), r(1, 0, "b")}, []string{"a", "b", "c"}},
		{"all three", []*rec{r(0, 0, "a"), r(2, time.Second, "z"), r(2, time.Second, "y"), r(2, 0, "x")}, []string{"x", "y", "z", "a"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sortClaimed(c.in)
			var got []string
			for _, x := range c.in {
				got = append(got, x.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("order %v, want %v", got, c.want)
			}
		})
	}
}

// The monitor's read of when the next lease or delay falls due must not
// step over the dead tasks_running entries that a burn-down leaves until
// VACUUM: unbounded, it visited every task completed since.
func TestNextDueSkipsDeadLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	const n = 3000
	nts := make([]norn.NewTask, n+1)
	for i := range nts {
		nts[i] = norn.NewTask{Queue: "due"}
	}
	if _, err := s.Submit(ctx, nts...); err != nil {
		t.Fatal(err)
	}
	for done := 0; done < n; {
		got, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"due"}, N: min(1000, n-done)})
		if err != nil {
			t.Fatal(err)
		}
		ops := make([]norn.LeaseOp, len(got))
		for i, tk := range got {
			ops[i] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: tk.ID, Lease: tk.Lease, Worker: "w"}}
		}
		if _, err := s.LeaseBatch(ctx, ops); err != nil {
			t.Fatal(err)
		}
		done += len(got)
	}
	// One live lease, due later than every completed task's was.
	if got, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"due"}, N: 1}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v, %d tasks", err, len(got))
	}
	var plan []string
	if err := s.withConn(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) "+s.q(nextDueSQL), time.Second.Microseconds())
		if err != nil {
			return err
		}
		plan, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}); err != nil {
		t.Fatal(err)
	}
	most := 0 // the most buffers of any node of the execution (planning excluded)
	for _, l := range plan {
		if strings.HasPrefix(strings.TrimSpace(l), "Planning") {
			break
		}
		for _, f := range strings.Fields(l) {
			for _, p := range []string{"hit=", "read="} {
				if v, ok := strings.CutPrefix(f, p); ok {
					k, _ := strconv.Atoi(v)
					most = max(most, k)
				}
			}
		}
	}
	if most > 20 {
		t.Fatalf("the next-due read touched %d buffers after %d completed leases:\n%s", most, n, strings.Join(plan, "\n"))
	}
}
