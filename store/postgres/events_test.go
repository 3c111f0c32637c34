package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/nornq/norn"
)

// TestCountedEventsBetweenNodes: while every subscriber only counts, a
// write's submissions, assignments and completions reach the other nodes
// as one line per queue, and the counts add up; a subscriber that wants
// every event turns per-task lines back on at once, for every node, and
// the next renewal after it leaves turns them off again.
func TestCountedEventsBetweenNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, nodes := openNodes(t, 2)
	a, b := nodes[0], nodes[1]
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	counts, err := a.Subscribe(sctx, norn.EventFilter{Counts: true})
	if err != nil {
		t.Fatal(err)
	}
	defer counts.Close()
	next := func(st norn.EventStream, what string) norn.Event {
		t.Helper()
		got := make(chan norn.Event, 1)
		go func() {
			if st.Next() {
				got <- st.Item()
			}
		}()
		select {
		case ev := <-got:
			if ev.Kind == norn.EventLagged {
				t.Fatalf("%s: lagged", what)
			}
			return ev
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no event within 10s", what)
		}
		return norn.Event{}
	}
	// work submits five tasks on b (one COPY), claims them in one claim
	// and completes them in one call.
	work := func() {
		t.Helper()
		nts := make([]norn.NewTask, 5)
		for i := range nts {
			nts[i] = norn.NewTask{Queue: "q"}
		}
		if _, err := b.Submit(ctx, nts...); err != nil {
			t.Fatal(err)
		}
		got, err := b.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q"}, N: 5})
		if err != nil || len(got) != 5 {
			t.Fatalf("claim: %d tasks, %v", len(got), err)
		}
		ops := make([]norn.LeaseOp, len(got))
		for i, tk := range got {
			ops[i] = norn.LeaseOp{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: tk.ID, Worker: "w", Lease: tk.Lease}}
		}
		res, err := b.LeaseBatch(ctx, ops)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			if r.Err != nil {
				t.Fatalf("complete %d: %v", i, r.Err)
			}
		}
	}

	work()
	for _, kind := range []norn.EventKind{norn.EventSubmitted, norn.EventKind(norn.TaskAssignment), norn.EventKind(norn.TaskComplete)} {
		ev := next(counts, "counted")
		if ev.Kind != kind || ev.Count != 5 || ev.TaskID != "" || ev.Queue != "q" || ev.Time.IsZero() {
			t.Fatalf("event %+v, want one counted %s of 5 tasks in q", ev, kind)
		}
	}

	// A subscriber that wants every event, on the other node.
	all, err := b.Subscribe(sctx, norn.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	work()
	for _, st := range []struct {
		s    norn.EventStream
		name string
	}{{counts, "counting subscriber"}, {all, "full subscriber"}} {
		n := map[norn.EventKind]int{}
		for range 15 {
			ev := next(st.s, st.name)
			if ev.Count != 0 || ev.TaskID == "" {
				t.Fatalf("%s: event %+v, want one per task", st.name, ev)
			}
			n[ev.Kind]++
		}
		if n[norn.EventSubmitted] != 5 || n[norn.EventKind(norn.TaskAssignment)] != 5 || n[norn.EventKind(norn.TaskComplete)] != 5 {
			t.Fatalf("%s: %v, want five of each kind", st.name, n)
		}
	}

	// It leaves; b's row goes with its streams (as when its store closes
	// or its announcement expires), and counting resumes.
	all.Close()
	b.withdrawSubscriber(ctx)
	work()
	for _, kind := range []norn.EventKind{norn.EventSubmitted, norn.EventKind(norn.TaskAssignment), norn.EventKind(norn.TaskComplete)} {
		if ev := next(counts, "counted again"); ev.Kind != kind || ev.Count != 5 {
			t.Fatalf("event %+v, want one counted %s of 5 tasks", ev, kind)
		}
	}

	// On the counting node itself, a full stream turns per-task lines on
	// before Subscribe returns, and the renewal after it closes turns
	// them off.
	mine, err := a.Subscribe(sctx, norn.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	work()
	if ev := next(mine, "full stream on the counting node"); ev.Kind != norn.EventSubmitted || ev.Count != 0 || ev.TaskID == "" {
		t.Fatalf("event %+v, want a per-task submission", ev)
	}
	mine.Close()
	if err := a.announceSubscriber(ctx); err != nil {
		t.Fatal(err)
	}
	for range 15 { // what the last work sent, one per task
		next(counts, "per-task events before the renewal")
	}
	work()
	if ev := next(counts, "after the renewal"); ev.Kind != norn.EventSubmitted || ev.Count != 5 {
		t.Fatalf("event %+v, want one counted submission of 5 tasks", ev)
	}
}

// TestCountedLinesLagOnlyAnnouncedFullStreams: a stream that wants every
// event gets EventLagged for a counted line only once the marker of its
// own announcement has come through (lines before it are from writes
// committed before it subscribed), and only for its queues; a counting
// stream gets the counted event.
func TestCountedLinesLagOnlyAnnouncedFullStreams(t *testing.T) {
	ss := newSubscribers()
	ctx := t.Context()
	stream := func(token uint64, f norn.EventFilter) *eventStream {
		st := &eventStream{ss: ss, filter: f, ctx: ctx, ch: make(chan norn.Event, 8), done: make(chan struct{}), token: token}
		ss.subs[st] = struct{}{}
		return st
	}
	full, other, counts := stream(1, norn.EventFilter{}), stream(2, norn.EventFilter{Queues: []string{"r"}}), stream(3, norn.EventFilter{Counts: true})
	counted := norn.Event{Kind: norn.EventSubmitted, Queue: "q", Status: norn.StatusReady, Count: 3, Time: time.Now()}
	ss.publish(counted)
	if len(full.ch) != 0 || len(other.ch) != 0 {
		t.Fatalf("before their markers: %d and %d events, want none", len(full.ch), len(other.ch))
	}
	if ev := <-counts.ch; ev != counted {
		t.Fatalf("counting stream got %+v, want %+v", ev, counted)
	}
	ss.announced(1)
	ss.announced(2)
	ss.publish(counted)
	if ev := <-full.ch; ev.Kind != norn.EventLagged {
		t.Fatalf("announced full stream got %+v, want Lagged", ev)
	}
	if len(other.ch) != 0 {
		t.Fatalf("a stream of another queue got %+v", <-other.ch)
	}
	one := norn.Event{Kind: norn.EventSubmitted, TaskID: "x", Queue: "q", Status: norn.StatusReady, Version: 1, Time: time.Now()}
	ss.publish(one)
	if ev := <-full.ch; ev != one {
		t.Fatalf("full stream got %+v, want %+v", ev, one)
	}
}

// TestAnnouncementMarkerComesThrough: Subscribe's announcement sends its
// stream's marker, which this node's listener reads and no other node's
// mistakes for its own.
func TestAnnouncementMarkerComesThrough(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, nodes := openNodes(t, 2)
	a, b := nodes[0], nodes[1]
	sb, err := b.Subscribe(ctx, norn.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	sa, err := a.Subscribe(ctx, norn.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	isAnnounced := func(s *Store, st norn.EventStream) bool {
		s.subs.mu.Lock()
		defer s.subs.mu.Unlock()
		return st.(*eventStream).announced
	}
	await.Until(t, 10*time.Second, "a's stream to be announced", func() bool { return isAnnounced(a, sa) })
	// A marker names its node: b takes only its own.
	st := &eventStream{ss: b.subs, token: 99, ch: make(chan norn.Event, 1), done: make(chan struct{})}
	b.subs.mu.Lock()
	b.subs.subs[st] = struct{}{}
	b.subs.mu.Unlock()
	b.dispatch(announcedWord + "\t" + a.node + "\t99")
	if isAnnounced(b, st) {
		t.Fatal("b took a's marker for its own stream")
	}
	b.dispatch(announcedWord + "\t" + b.node + "\t99")
	if !isAnnounced(b, st) {
		t.Fatal("b's marker did not announce its stream")
	}
}
