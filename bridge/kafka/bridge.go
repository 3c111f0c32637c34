package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nornq/norn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Bridge is one bridge node. Any number of nodes may share a store and a
// consumer group; they split the input partitions and the due messages.
type Bridge struct {
	cfg   Config
	store norn.Store
	cl    *kgo.Client
	log   *slog.Logger
	m     *metrics
	node  string
	// prefix starts the id of every task the bridge owns (see TaskID).
	prefix string
	// lat measures publish latency for the adaptive timing advance.
	lat *latency

	// now is the bridge's clock; tests may replace it before Run.
	now func() time.Time
	// hooks let tests simulate a node dying at a chosen point.
	hooks hooks

	closeOnce sync.Once
}

// hooks are test seams; a nil hook does nothing.
type hooks struct {
	// beforePublish runs after a claim; returning false drops the batch as
	// if the node died holding it.
	beforePublish func(tasks []*norn.Task) bool
	// beforeComplete runs after the broker acknowledged; returning false
	// drops the batch as if the node died before completing it.
	beforeComplete func(tasks []*norn.Task) bool
}

// New builds a bridge node. It validates cfg and creates the Kafka client
// (which connects lazily); the store is first used by Run.
func New(cfg Config, store norn.Store) (*Bridge, error) {
	if store == nil {
		return nil, norn.Invalid("store", "a store is required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, norn.Invalid("Registerer", "%v", err)
	}
	opts, err := cfg.ClientOptions()
	if err != nil {
		return nil, err
	}
	opts = append(opts,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.InTopic),
		// Offsets are committed by hand, only once the store holds the
		// polled messages; blocking rebalances while a polled batch is being
		// stored keeps a commit from landing on a partition we lost.
		kgo.DisableAutoCommit(),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMaxWait(time.Second),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// Idempotence is franz-go's default with acks=all; linger 0 keeps
		// firing latency low.
		kgo.ProducerLinger(0),
		kgo.DefaultProduceTopic(cfg.OutTopic),
	)
	opts = append(opts, cfg.extraOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, norn.Invalid("Brokers", "%v", err)
	}
	node := uuid.NewString()
	return &Bridge{cfg: cfg, store: store, cl: cl, m: m, node: node, now: time.Now, prefix: idPrefix(cfg.Queue), lat: newLatency(),
		log: cfg.Logger.With("component", "kafka-bridge", "node", node)}, nil
}

// Stats returns the bridge's counters.
func (b *Bridge) Stats() Stats { return b.m.stats() }

// Healthy reports whether a Kafka broker answers, for /healthz and /readyz.
func (b *Bridge) Healthy(ctx context.Context) error {
	if err := b.cl.Ping(ctx); err != nil {
		return &norn.Error{Code: norn.CodeUnavailable, Message: "kafka unavailable", Err: err}
	}
	return nil
}

// Close releases the Kafka client (leaving the consumer group). Call it
// after Run returned; it is safe to call more than once.
func (b *Bridge) Close() {
	b.closeOnce.Do(func() { b.cl.CloseAllowingRebalance() })
}

// Run consumes, stores and fires messages until ctx is cancelled, then
// finishes the batches it is publishing and returns nil. Store and Kafka
// outages are logged and retried; they never end Run.
func (b *Bridge) Run(ctx context.Context) error {
	worker, err := b.register(ctx)
	if err != nil {
		return nil //nolint:nilerr // only a cancelled ctx ends registration
	}
	b.log.Info("kafka bridge started", "worker", worker, "in_topic", b.cfg.InTopic,
		"out_topic", b.cfg.OutTopic, "group", b.cfg.Group, "queue", b.cfg.Queue)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); b.consumeLoop(ctx) }()
	go func() { defer wg.Done(); b.fireLoop(ctx, worker) }()
	if b.cfg.FailureDetectionInterval > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); b.detectLoop(ctx) }()
	}
	wg.Wait()
	b.log.Info("kafka bridge stopped")
	return nil
}

// register obtains a worker id from the store, retrying while it is down.
func (b *Bridge) register(ctx context.Context) (string, error) {
	host, _ := os.Hostname()
	bo := b.backoff()
	for {
		id, err := b.store.RegisterWorker(ctx, norn.WorkerInfo{
			Name: "kafka-bridge " + host + " " + b.node, Queues: []string{b.cfg.Queue}})
		if err == nil {
			return id, nil
		}
		b.log.Warn("registering with the store failed; retrying", "err", err)
		if !bo.wait(ctx) {
			return "", ctx.Err()
		}
	}
}

// ---------------------------------------------------------------- consuming

func (b *Bridge) consumeLoop(ctx context.Context) {
	var lastErrLog time.Time
	for ctx.Err() == nil {
		fetches := b.cl.PollRecords(ctx, b.cfg.MaxPollRecords)
		if fetches.IsClientClosed() {
			return
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if ctx.Err() != nil || errors.Is(err, context.Canceled) {
				return
			}
			// A broker outage produces an error per fetch; one line a second is plenty.
			if time.Since(lastErrLog) > time.Second {
				lastErrLog = time.Now()
				b.log.Warn("fetching from the input topic failed; retrying", "topic", topic, "partition", p, "err", err)
			}
		})
		recs := fetches.Records()
		if len(recs) > 0 {
			if !b.enqueue(ctx, recs) {
				// Cancelled before the store held the batch: commit nothing,
				// the group re-delivers it.
				b.cl.AllowRebalance()
				return
			}
			b.commit(ctx)
		}
		b.cl.AllowRebalance()
	}
}

// commit commits the polled offsets. A failed commit only causes
// re-delivery, which the store turns into ignored duplicates.
func (b *Bridge) commit(ctx context.Context) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := b.cl.CommitUncommittedOffsets(cctx); err != nil {
		b.log.Warn("committing input offsets failed; the messages will be re-delivered and ignored as duplicates", "err", err)
	}
}

// item is one valid input message on its way into the store.
type item struct {
	m      *message
	taskID string
	task   norn.NewTask
	rec    *kgo.Record
}

// enqueue stores or publishes every valid record of one poll. It returns
// false only when ctx was cancelled before the batch was durable.
func (b *Bridge) enqueue(ctx context.Context, recs []*kgo.Record) bool {
	now := b.now()
	advance := b.advance()
	var delayed, immediate []*item
	seen := make(map[string]bool, len(recs))
	for _, r := range recs {
		b.m.consumed.Inc()
		m, err := parseRecord(r)
		if err == nil {
			var it *item
			var fire bool
			it, fire, err = b.newItem(m, r, now, advance)
			if err == nil {
				if seen[it.taskID] {
					b.m.duplicates.Inc()
					continue
				}
				seen[it.taskID] = true
				if fire {
					immediate = append(immediate, it)
				} else {
					delayed = append(delayed, it)
				}
				continue
			}
		}
		b.skip(r, err)
	}
	if len(immediate) > 0 {
		var ok bool
		immediate, ok = b.dropPending(ctx, immediate)
		if !ok {
			return false
		}
		delayed = append(delayed, b.publishNow(ctx, immediate)...)
	}
	if len(delayed) > 0 {
		return b.submit(ctx, delayed)
	}
	return true
}

// newItem prepares m for the store. It is due (run_at) ClaimAhead before
// its firing time, deadline − advance, so the firing node holds it by then;
// fire says whether the firing time has come already.
func (b *Bridge) newItem(m *message, r *kgo.Record, now time.Time, advance time.Duration) (it *item, fire bool, err error) {
	raw, err := encodeSpec(m, r.Topic, r.Partition, r.Offset)
	if err != nil {
		return nil, false, err
	}
	zero := 0
	id := TaskID(b.cfg.Queue, m.ID)
	fireAt := m.Deadline.Add(-advance)
	return &item{m: m, taskID: id, rec: r, task: norn.NewTask{
		ID: id, Queue: b.cfg.Queue, Spec: raw,
		RunAt: fireAt.Add(-b.cfg.ClaimAhead),
		// Unlimited attempts: a message must never be aborted because
		// nodes holding it died; the hold is the claim's lease.
		MaxAttempts: &zero,
		Timeout:     norn.Duration(b.cfg.HoldTime),
	}}, !fireAt.After(now), nil
}

// owns reports whether t is one of the bridge's tasks: in its queue and
// under its id prefix. Every path that reads a task the bridge did not claim
// from its own queue checks this before treating the task as a message, so
// an application task can never be taken for a duplicate, replaced or deleted.
func (b *Bridge) owns(t *norn.Task) bool {
	return t.Queue == b.cfg.Queue && strings.HasPrefix(t.ID, b.prefix)
}

// conflict skips a message whose task id is held by a task that is not the
// bridge's: something else submitted a task with an id in the bridge's
// namespace to another queue. The message cannot be stored without touching
// that task, so it is skipped (logged and counted as id_conflict).
func (b *Bridge) conflict(it *item, t *norn.Task) {
	b.skip(it.rec, &invalidError{reasonIDConflict, fmt.Sprintf(
		"task id %q is taken by a task of queue %q that the bridge does not own", it.taskID, t.Queue)})
}

func (b *Bridge) skip(r *kgo.Record, err error) {
	reason := reasonRejected
	var ie *invalidError
	if errors.As(err, &ie) {
		reason = ie.reason
	}
	b.m.invalid.WithLabelValues(reason).Inc()
	b.log.Warn("skipping input message", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset,
		"reason", reason, "err", err)
}

// dropPending removes messages whose id is pending in the store (Chronos:
// publish at once "unless that id is already pending").
func (b *Bridge) dropPending(ctx context.Context, items []*item) ([]*item, bool) {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.taskID
	}
	var found []*norn.Task
	ok := b.retry(ctx, "looking up ids in the store", func() error {
		var err error
		found, _, err = b.store.GetMany(ctx, ids)
		return err
	})
	if !ok {
		return nil, false
	}
	pending := make(map[string]bool, len(found))
	for _, t := range found {
		// A task that is not the bridge's says nothing about the message;
		// a due message does not need the store, so it is published.
		if b.owns(t) && t.Status.Pending() {
			pending[t.ID] = true
		}
	}
	out := items[:0]
	for _, it := range items {
		if pending[it.taskID] {
			b.m.duplicates.Inc()
			continue
		}
		out = append(out, it)
	}
	return out, true
}

// publishNow publishes messages whose firing time has come directly and
// returns those that could not be published: they are stored (due now) so
// the firing loop retries them and the input offset can still be committed.
func (b *Bridge) publishNow(ctx context.Context, items []*item) (failed []*item) {
	if len(items) == 0 {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, b.cfg.HoldTime)
	defer cancel()
	errs := b.produce(pctx, len(items), func(i int) *message { return items[i].m })
	for i, err := range errs {
		if err != nil {
			failed = append(failed, items[i])
			continue
		}
		b.m.firedImmediately.Inc()
	}
	if len(failed) > 0 {
		b.log.Warn("publishing late messages failed; storing them to fire later", "count", len(failed), "err", firstErr(errs))
	}
	return failed
}

// produce publishes n messages concurrently and waits for every
// acknowledgement, observing the firing lateness of each.
func (b *Bridge) produce(ctx context.Context, n int, msg func(i int) *message) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := 0; i < n; i++ {
		m := msg(i)
		sent := time.Now()
		b.cl.Produce(ctx, m.record(b.cfg.OutTopic), func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				b.m.publishErrors.Inc()
				errs[i] = err
				return
			}
			b.lat.observe(time.Since(sent))
			b.m.lateness.Observe(b.now().Sub(m.Deadline).Seconds())
		})
	}
	wg.Wait()
	return errs
}

func firstErr(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

var batchIndex = regexp.MustCompile(`^tasks\[(\d+)\]`)

// idTaken reports the batch index of a task whose id the store refused
// because a task of another queue holds it (ids are unique across queues).
func idTaken(err error) (int, bool) {
	var e *norn.Error
	if !errors.As(err, &e) || e.Code != norn.CodeConflict || !strings.HasSuffix(e.Field, "].id") {
		return 0, false
	}
	mm := batchIndex.FindStringSubmatch(e.Field)
	if mm == nil {
		return 0, false
	}
	i, err := strconv.Atoi(mm[1])
	return i, err == nil
}

// submit stores items durably, retrying store outages until ctx ends.
// Items the store rejects are skipped (counted invalid); duplicates of a
// pending id are ignored; a finished task left under the same id (a node
// died between completing and deleting it) is replaced.
func (b *Bridge) submit(ctx context.Context, items []*item) bool {
	bo := b.backoff()
	for len(items) > 0 {
		tasks := make([]norn.NewTask, len(items))
		for i, it := range items {
			tasks[i] = it.task
		}
		res, err := b.store.Submit(ctx, tasks...)
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			code := norn.CodeOf(err)
			if i, ok := idTaken(err); ok && i < len(items) {
				b.skip(items[i].rec, &invalidError{reasonIDConflict, err.Error()})
				items = append(items[:i:i], items[i+1:]...)
				continue
			}
			if code == norn.CodeInvalidArgument || code == norn.CodeTooLarge {
				var e *norn.Error
				if errors.As(err, &e) {
					if mm := batchIndex.FindStringSubmatch(e.Field); mm != nil {
						if i, _ := strconv.Atoi(mm[1]); i < len(items) {
							b.skip(items[i].rec, err)
							items = append(items[:i:i], items[i+1:]...)
							continue
						}
					}
				}
				if len(items) > 1 {
					// The store did not say which one: store them one by one.
					for _, it := range items {
						if !b.submit(ctx, []*item{it}) {
							return false
						}
					}
					return true
				}
				b.skip(items[0].rec, err)
				return true
			}
			b.log.Warn("storing delayed messages failed; retrying", "count", len(items), "err", err)
			if !bo.wait(ctx) {
				return false
			}
			continue
		}
		var replace []*item
		for i, s := range res {
			switch {
			case !s.Duplicate:
				b.m.stored.Inc()
			case !b.owns(s.Task):
				b.conflict(items[i], s.Task)
			case s.Task.Status.Pending():
				b.m.duplicates.Inc()
			default:
				replace = append(replace, items[i])
			}
		}
		for _, it := range replace {
			if !b.replaceFinished(ctx, it) {
				return false
			}
		}
		return true
	}
	return true
}

// replaceFinished deletes a finished task of the bridge holding its id
// (fenced by version, so a concurrent writer is never overwritten) and stores
// it anew. A task the bridge does not own is never deleted.
func (b *Bridge) replaceFinished(ctx context.Context, it *item) bool {
	bo := b.backoff()
	for attempt := 0; ; attempt++ {
		t, err := b.store.Get(ctx, it.taskID)
		switch {
		case errors.Is(err, norn.ErrNotFound):
		case err != nil:
			if ctx.Err() != nil {
				return false
			}
			b.log.Warn("reading a finished message failed; retrying", "id", it.m.ID, "err", err)
			if !bo.wait(ctx) {
				return false
			}
			continue
		case !b.owns(t):
			b.conflict(it, t)
			return true
		case t.Status.Pending():
			b.m.duplicates.Inc()
			return true
		default:
			_, err = b.store.Transact(ctx, norn.Txn{Delete: []string{t.ID}, Require: []norn.Requirement{{ID: t.ID, Version: t.Version}}})
			if err != nil && ctx.Err() == nil && !errors.Is(err, norn.ErrConflict) && !errors.Is(err, norn.ErrNotFound) {
				b.log.Warn("deleting a finished message failed; retrying", "id", it.m.ID, "err", err)
				if !bo.wait(ctx) {
					return false
				}
				continue
			}
		}
		res, err := b.store.Submit(ctx, it.task)
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			if c := norn.CodeOf(err); c == norn.CodeInvalidArgument || c == norn.CodeTooLarge {
				b.skip(it.rec, err)
				return true
			}
			if _, ok := idTaken(err); ok {
				b.skip(it.rec, &invalidError{reasonIDConflict, err.Error()})
				return true
			}
			b.log.Warn("storing a delayed message failed; retrying", "id", it.m.ID, "err", err)
			if !bo.wait(ctx) {
				return false
			}
			continue
		}
		if !res[0].Duplicate {
			b.m.stored.Inc()
			return true
		}
		if !b.owns(res[0].Task) {
			b.conflict(it, res[0].Task)
			return true
		}
		if res[0].Task.Status.Pending() {
			b.m.duplicates.Inc()
			return true
		}
		// Lost a race with another writer; look again.
		if attempt > 10 && !bo.wait(ctx) {
			return false
		}
	}
}

// ------------------------------------------------------- failure detection

// detectLoop asks the store to run its monitor regularly, which returns
// messages whose hold expired to ready so the next claim takes them over.
func (b *Bridge) detectLoop(ctx context.Context) {
	t := time.NewTicker(b.jitter(b.cfg.FailureDetectionInterval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rep, err := b.store.Sweep(ctx)
		if err != nil {
			if ctx.Err() == nil {
				b.log.Debug("failure detection sweep failed", "err", err)
			}
			continue
		}
		if rep.TimedOut > 0 {
			b.log.Warn("holds expired on due messages (suspected node failure); they will be taken over", "count", rep.TimedOut)
		}
	}
}

// ----------------------------------------------------------------- helpers

// jitter spreads nodes' polls so they do not query the store in unison.
func (b *Bridge) jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/5+1))
}

// backoff doubles from the poll interval up to 5s.
type backoff struct {
	first, cur time.Duration
}

func (b *Bridge) backoff() *backoff {
	return &backoff{first: b.cfg.PollInterval, cur: b.cfg.PollInterval}
}

func (b *backoff) reset() { b.cur = b.first }

// wait sleeps for the current back-off; false if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	t := time.NewTimer(b.cur)
	defer t.Stop()
	b.cur *= 2
	if b.cur > 5*time.Second {
		b.cur = 5 * time.Second
	}
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// retry runs f until it succeeds or ctx ends.
func (b *Bridge) retry(ctx context.Context, what string, f func() error) bool {
	bo := b.backoff()
	for {
		err := f()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		b.log.Warn(what+" failed; retrying", "err", err)
		if !bo.wait(ctx) {
			return false
		}
	}
}
