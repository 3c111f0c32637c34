package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"

	"github.com/nornq/norn"
)

// holdSubmits makes a store whose second merged submit waits, before its
// COPY, until the returned release is called; flushes counts the merged
// submits started.
func holdSubmits(t *testing.T) (s *Store, flushes func() []int, release func()) {
	t.Helper()
	hold := make(chan struct{})
	var mu sync.Mutex
	var seen []int
	s = openTest(t, nil, func(c *Config) {
		c.DisableMonitor = true
		c.submitPause = func(callers int) {
			mu.Lock()
			seen = append(seen, callers)
			held := len(seen) == 2
			mu.Unlock()
			if held {
				<-hold
			}
		}
	})
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	t.Cleanup(release)
	flushes = func() []int { mu.Lock(); defer mu.Unlock(); return append([]int(nil), seen...) }
	return s, flushes, release
}

// writers counts the transactions that wrote the tasks of queues.
func (s *Store) writers(t *testing.T, queues ...string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(context.Background(), `SELECT count(DISTINCT xmin::text) FROM `+s.sql.schema+
		`.tasks WHERE queue = ANY($1)`, queues).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// queuedSubmits is how many batches wait for a merged submit.
func (s *Store) queuedSubmits() int {
	s.submitter.mu.Lock()
	defer s.submitter.mu.Unlock()
	return len(s.submitter.queue)
}

// TestSubmitsMerged holds a merged submit while other callers submit: their
// batches then go out together in the next COPY, and each caller gets its
// own tasks, as stored — spec, priority, labels, a delay (scheduled), the
// queue's defaults.
func TestSubmitsMerged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, flushes, release := holdSubmits(t)
	if _, err := s.UpdateQueue(ctx, "slow", norn.QueueUpdate{MaxAttempts: ptr(7)}); err != nil {
		t.Fatal(err)
	}
	// The first flush goes through; the second, with one batch, is held.
	if _, err := s.Submit(ctx, norn.NewTask{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { _, err := s.Submit(ctx, norn.NewTask{Queue: "q"}); held <- err }()
	await.Until(t, 10*time.Second, "the held flush", func() bool { return len(flushes()) == 2 })

	const callers = 6
	var wg sync.WaitGroup
	res := make([][]norn.Submitted, callers)
	errs := make([]error, callers)
	for c := 0; c < callers; c++ {
		batch := make([]norn.NewTask, 3)
		for i := range batch {
			batch[i] = norn.NewTask{Queue: "q", Spec: json.RawMessage(fmt.Sprintf(`{"c":%d,"i":%d}`, c, i)),
				Priority: uint32(c*10 + i), Labels: map[string]string{"caller": fmt.Sprint(c)}}
		}
		if c == 4 {
			batch[0].Queue = "slow"
			batch[1].RunAt = time.Now().Add(time.Hour)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[c], errs[c] = s.Submit(ctx, batch...)
		}()
	}
	await.Until(t, 10*time.Second, "every batch queued", func() bool { return s.queuedSubmits() == callers })
	release()
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	// One COPY, one transaction: the held batch and every batch queued
	// behind it share the transaction id that wrote them.
	if n := s.writers(t, "q", "slow"); n != 2 {
		t.Fatalf("the tasks were written by %d transactions, want 2 (the first submit; the held one with every batch queued behind it)", n)
	}
	seen := map[string]bool{}
	for c := 0; c < callers; c++ {
		if errs[c] != nil || len(res[c]) != 3 {
			t.Fatalf("caller %d: %d results, %v", c, len(res[c]), errs[c])
		}
		for i, r := range res[c] {
			if r.Duplicate || seen[r.Task.ID] {
				t.Fatalf("caller %d task %d: duplicate %v / id %s seen before", c, i, r.Duplicate, r.Task.ID)
			}
			seen[r.Task.ID] = true
			got, err := s.Get(ctx, r.Task.ID)
			if err != nil {
				t.Fatalf("caller %d task %d: %v", c, i, err)
			}
			if string(got.Spec) != fmt.Sprintf(`{"c":%d,"i":%d}`, c, i) || got.Priority != uint32(c*10+i) ||
				got.Labels["caller"] != fmt.Sprint(c) || got.Status != r.Task.Status || got.Queue != r.Task.Queue ||
				!got.Created.Equal(r.Task.Created) || got.MaxAttempts != r.Task.MaxAttempts {
				t.Fatalf("caller %d task %d stored as %+v, answered %+v", c, i, got, r.Task)
			}
		}
	}
	if st := res[4][1].Task.Status; st != norn.StatusScheduled {
		t.Fatalf("delayed task is %s", st)
	}
	if m := res[4][0].Task.MaxAttempts; m != 7 {
		t.Fatalf("task of queue slow has max_attempts %d, want the queue's 7", m)
	}
	tasks, err := s.Claim(ctx, norn.ClaimRequest{Worker: "w", Queues: []string{"q", "slow"}, N: 100, Timeout: norn.Duration(time.Minute)})
	if err != nil || len(tasks) != 2+callers*3-1 {
		t.Fatalf("claimed %d tasks (%v), want %d", len(tasks), err, 2+callers*3-1)
	}
}

// TestMergedSubmitBadRowFailsOnlyItsCaller merges a batch the database
// refuses with good ones: the merged COPY fails, each batch is written
// again on its own, and only the bad one's caller gets the error.
func TestMergedSubmitBadRowFailsOnlyItsCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, flushes, release := holdSubmits(t)
	// Something norn's validation lets through and the database refuses.
	if _, err := s.pool.Exec(ctx, `ALTER TABLE `+s.sql.schema+`.tasks ADD CONSTRAINT no_poison CHECK (queue <> 'poison')`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(ctx, norn.NewTask{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { _, err := s.Submit(ctx, norn.NewTask{Queue: "q"}); held <- err }()
	await.Until(t, 10*time.Second, "the held flush", func() bool { return len(flushes()) == 2 })
	queues := []string{"a", "poison", "b"}
	res := make([][]norn.Submitted, len(queues))
	errs := make([]error, len(queues))
	var wg sync.WaitGroup
	for i, q := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res[i], errs[i] = s.Submit(ctx, norn.NewTask{Queue: q}, norn.NewTask{Queue: q})
		}()
		await.Until(t, 10*time.Second, "the batch queued", func() bool { return s.queuedSubmits() == i+1 })
	}
	release()
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if errs[1] == nil {
		t.Fatal("the batch the database refuses was answered as stored")
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil {
			t.Fatalf("batch %d failed with the refused one: %v", i, errs[i])
		}
		for _, r := range res[i] {
			if _, err := s.Get(ctx, r.Task.ID); err != nil {
				t.Fatalf("batch %d: %v", i, err)
			}
		}
	}
	list, err := s.List(ctx, norn.Query{Filter: norn.Filter{Queues: []string{"poison"}}})
	if err != nil || len(list.Tasks) != 0 {
		t.Fatalf("poison queue holds %d tasks (%v)", len(list.Tasks), err)
	}
	// The good batches were written again on their own, after the held
	// flush failed with all four.
	if n := s.writers(t, "a", "b"); n != 2 {
		t.Fatalf("queues a and b were written by %d transactions, want 2", n)
	}
}

// TestQueuedSubmitGivesUp: a caller whose context ends while its batch
// waits for a merged submit takes the batch back — nothing of it is stored
// — and the others' batches are written.
func TestQueuedSubmitGivesUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, flushes, release := holdSubmits(t)
	if _, err := s.Submit(ctx, norn.NewTask{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	held := make(chan error, 1)
	go func() { _, err := s.Submit(ctx, norn.NewTask{Queue: "q"}); held <- err }()
	await.Until(t, 10*time.Second, "the held flush", func() bool { return len(flushes()) == 2 })

	cctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() { _, err := s.Submit(cctx, norn.NewTask{Queue: "gone"}); gaveUp <- err }()
	kept := make(chan error, 1)
	go func() {
		await.Until(t, 10*time.Second, "the first batch queued", func() bool { return s.queuedSubmits() == 1 })
		_, err := s.Submit(ctx, norn.NewTask{Queue: "kept"})
		kept <- err
	}()
	await.Until(t, 10*time.Second, "both batches queued", func() bool { return s.queuedSubmits() == 2 })
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that gave up got %v", err)
	}
	if n := s.queuedSubmits(); n != 1 {
		t.Fatalf("%d batches queued after the caller gave up, want 1", n)
	}
	release()
	if err := <-kept; err != nil {
		t.Fatal(err)
	}
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]int{"gone": 0, "kept": 1} {
		list, err := s.List(ctx, norn.Query{Filter: norn.Filter{Queues: []string{q}}})
		if err != nil || len(list.Tasks) != want {
			t.Fatalf("queue %s holds %d tasks (%v), want %d", q, len(list.Tasks), err, want)
		}
	}
}

// TestCopyEncodingRoundTrip writes tasks with every column the COPY path
// sets, through the hand-written binary encoding, and reads them back.
func TestCopyEncodingRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTest(t, nil, func(c *Config) { c.DisableMonitor = true })
	if _, err := s.UpdateQueue(ctx, "fair", norn.QueueUpdate{FairBy: ptr("concurrency_key")}); err != nil {
		t.Fatal(err)
	}
	retry := &norn.RetryPolicy{MaxRetries: 4, Base: norn.Duration(time.Second), Max: norn.Duration(time.Minute)}
	in := []norn.NewTask{
		{Queue: "q"},
		{Queue: "q", Spec: json.RawMessage(`{"a":"tab\there, back\\slash, ü, \u0000"}`), Priority: 5,
			Labels:      map[string]string{"k": "v w, \"quoted\"", "ü": "\\"},
			RunAt:       time.Now().Add(time.Hour).Truncate(time.Microsecond),
			MaxAttempts: ptr(3), Retry: retry, Timeout: norn.Duration(90 * time.Second), MaxRuntime: norn.Duration(time.Hour),
			ConcurrencyKey: "ck ü", Traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			Tracestate: "a=b"},
		{Queue: "fair", ConcurrencyKey: "tenant-1", Priority: 1 << 31},
	}
	out, err := s.Submit(ctx, in...)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range out {
		got, err := s.Get(ctx, r.Task.ID)
		if err != nil {
			t.Fatal(err)
		}
		want := r.Task
		if string(got.Spec) != string(want.Spec) || got.Priority != in[i].Priority || got.Status != want.Status ||
			len(got.Labels) != len(in[i].Labels) || got.MaxAttempts != want.MaxAttempts ||
			got.Timeout != want.Timeout || got.MaxRuntime != want.MaxRuntime || got.ConcurrencyKey != in[i].ConcurrencyKey ||
			got.Traceparent != in[i].Traceparent || got.Tracestate != in[i].Tracestate ||
			!got.RunAt.Equal(want.RunAt) || !got.Created.Equal(want.Created) || fmt.Sprint(got.Retry) != fmt.Sprint(want.Retry) {
			t.Fatalf("task %d stored as %+v, answered %+v", i, got, want)
		}
		for k, v := range in[i].Labels {
			if got.Labels[k] != v {
				t.Fatalf("task %d label %q = %q, want %q", i, k, got.Labels[k], v)
			}
		}
	}
	var fairKey *string
	if err := s.pool.QueryRow(ctx, `SELECT fair_key FROM `+s.sql.schema+`.tasks WHERE id = $1`, out[2].Task.ID).Scan(&fairKey); err != nil {
		t.Fatal(err)
	}
	if fairKey == nil || *fairKey != "tenant-1" {
		t.Fatalf("fair key %v, want tenant-1", fairKey)
	}
	if out[1].Task.Status != norn.StatusScheduled || out[0].Task.Status != norn.StatusReady {
		t.Fatalf("statuses %s, %s", out[0].Task.Status, out[1].Task.Status)
	}
}

func ptr[T any](v T) *T { return &v }

// BenchmarkSubmitPrepare is the client's share of a plain submit of 1,000
// tasks with 200-byte specs, without the database: the plan (ids), the
// decisions (with the read's answers filled in) and the COPY encoding.
func BenchmarkSubmitPrepare(b *testing.B) {
	spec := json.RawMessage(`{"p":"` + string(make([]byte, 0)) + fmt.Sprintf("%0192d", 0) + `"}`)
	in := make([]norn.NewTask, 1000)
	for i := range in {
		in[i] = norn.NewTask{Queue: "bench", Spec: spec}
	}
	now := time.Now()
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		p, err := newSubmitPlan("tasks", in)
		if err != nil {
			b.Fatal(err)
		}
		p.now, p.existing, p.defaults = micro(now), map[string]stored{}, map[string]queueDefaults{}
		if err := p.decide(); err != nil {
			b.Fatal(err)
		}
		buf = appendCopyRows(buf[:0], p.recs, p.now)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(in)), "ns/task")
}
