package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nornq/norn"
)

// Fairness measures how long a small key's task waits behind one key's
// large backlog: one key has cfg.Backlog ready tasks, ten small keys
// submit 10 tasks/s each while cfg.Workers workers claim and complete as
// fast as they can, for cfg.Window. It runs twice, without and with
// fair_by concurrency_key, and reports for each the small keys'
// submit → claim latency (p50, p99, max) and the total claim throughput.
// With cfg.KeyLimit it runs a third time, with that key_limit and no
// fair_by: the large key's backlog is then held back by its limit, and the
// claims must find the small keys' tasks behind it.
func Fairness(ctx context.Context, st norn.Store, env Env, cfg Config) ([]Result, error) {
	cfg.defaults()
	var out []Result
	passes := []string{"plain", "fair"}
	if cfg.KeyLimit > 0 {
		passes = append(passes, "keylimit")
	}
	for _, pass := range passes {
		r, err := fairness(ctx, st, env, cfg, pass)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

const (
	fairSmallKeys = 10
	fairSmallRate = 10 // tasks/s per small key
)

func fairness(ctx context.Context, st norn.Store, env Env, cfg Config, pass string) (Result, error) {
	backlog := cfg.Backlog
	if backlog <= 0 {
		backlog = 1_000_000
	}
	window := cfg.Window
	if window <= 0 {
		window = 10 * time.Second
	}
	q := queueName(cfg.Queue)
	defer cleanup(ctx, cfg, st, q)
	workload, err := fairnessQueue(ctx, st, cfg, q, pass)
	if err != nil {
		return Result{}, err
	}
	body := spec(cfg.SpecBytes)
	if err := submitTasks(ctx, st, backlog, 1000, cfg.Workers, func(int) norn.NewTask {
		return norn.NewTask{Queue: q, Spec: body, ConcurrencyKey: "big"}
	}, func(d int64) { report(cfg, workload+": queueing the backlog", d, int64(backlog)) }); err != nil {
		return Result{}, err
	}
	// Let the flushes and compactions of queueing (and of the previous
	// pass's cleanup) finish, when asked to: they would be charged to
	// whichever pass runs second.
	if err := settle(ctx, cfg.Settle); err != nil {
		return Result{}, err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := &fairRun{st: st, cfg: cfg, q: q, workload: workload, body: body, cancel: cancel,
		submitted: map[string]time.Time{}}
	tm := startTiming(cfg)
	f.deadline = time.Now().Add(window)
	for w := 0; w < cfg.Workers; w++ {
		f.wg.Add(1)
		go f.claim(ctx, w)
	}
	for k := range fairSmallKeys {
		f.wg.Add(1)
		go f.submitSmall(ctx, k)
	}
	f.wg.Wait()
	if f.firstErr != nil {
		return Result{}, f.firstErr
	}
	end := time.Now()
	r := env.result(workload)
	tm.finish(&r, int(f.claimed.Load()), end)
	// Tasks still waiting count with the time they waited so far.
	for _, t0 := range f.submitted {
		f.lat = append(f.lat, end.Sub(t0))
	}
	r.Unclaimed = len(f.submitted)
	setPercentiles(&r, f.lat)
	r.Queued, r.Workers, r.Batch = backlog, cfg.Workers, cfg.ClaimBatch
	return r, nil
}

// fairnessQueue sets queue q up for pass and names the pass's workload.
func fairnessQueue(ctx context.Context, st norn.Store, cfg Config, q, pass string) (workload string, err error) {
	workload = "fairness-" + pass
	var u norn.QueueUpdate
	switch pass {
	case "fair":
		by := norn.FairByConcurrencyKey
		u.FairBy = &by
	case "keylimit":
		kl := cfg.KeyLimit
		u.KeyLimit = &kl
		workload += strconv.Itoa(kl)
	}
	if pass != "plain" {
		if _, err := st.UpdateQueue(ctx, q, u); err != nil {
			return "", err
		}
	}
	return workload, nil
}

// fairRun is one pass of the fairness measurement: the claimers, the small
// keys' submitters and what they share.
type fairRun struct {
	st       norn.Store
	cfg      Config
	q        string
	workload string
	body     json.RawMessage
	deadline time.Time
	cancel   context.CancelFunc

	mu        sync.Mutex
	submitted map[string]time.Time // small tasks not yet claimed
	lat       []time.Duration
	claimed   atomic.Int64
	firstErr  error
	once      sync.Once
	wg        sync.WaitGroup
}

func (f *fairRun) fail(err error) {
	f.once.Do(func() { f.firstErr = err; f.cancel() })
}

// claim is claimer w: it claims and completes as fast as it can until the
// window ends, timing the small keys' tasks it takes.
func (f *fairRun) claim(ctx context.Context, w int) {
	defer f.wg.Done()
	worker := "bench-" + strconv.Itoa(w)
	for ctx.Err() == nil && time.Now().Before(f.deadline) {
		k, err := ClaimRound(ctx, f.st, worker, f.q, f.cfg.ClaimBatch, func(tasks []*norn.Task) {
			at := time.Now()
			f.mu.Lock()
			defer f.mu.Unlock()
			for _, t := range tasks {
				if t0, ok := f.submitted[t.ID]; ok {
					f.lat = append(f.lat, at.Sub(t0))
					delete(f.submitted, t.ID)
				}
			}
		})
		if err != nil {
			if ctx.Err() == nil {
				f.fail(err)
			}
			return
		}
		if k == 0 {
			continue
		}
		report(f.cfg, f.workload, f.claimed.Add(int64(k)), 0)
	}
}

// submitSmall is small key k: fairSmallRate tasks a second until the
// window ends.
func (f *fairRun) submitSmall(ctx context.Context, k int) {
	defer f.wg.Done()
	key := "small-" + strconv.Itoa(k)
	tick := time.NewTicker(time.Second / fairSmallRate)
	defer tick.Stop()
	for ctx.Err() == nil && time.Now().Before(f.deadline) {
		t0 := time.Now()
		// The id is chosen here so the claimers can match the task
		// even when they claim it before Submit returns.
		id := fmt.Sprintf("%s-%s-%d", f.q, key, t0.UnixNano())
		f.mu.Lock()
		f.submitted[id] = t0
		f.mu.Unlock()
		if _, err := f.st.Submit(ctx, norn.NewTask{ID: id, Queue: f.q, Spec: f.body, ConcurrencyKey: key}); err != nil {
			if ctx.Err() == nil {
				f.fail(fmt.Errorf("submit: %w", err))
			}
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}
