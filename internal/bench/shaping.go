package bench

import (
	"context"
	"strconv"
	"time"

	"github.com/nornq/norn"
)

// Shaping measures what ordering and batching cost against a plain queue:
// the burn-down of the work workload three times on fresh queues, with
// the same workers and claim size:
//   - shaping-plain: plain tasks;
//   - shaping-sequences: the tasks spread over cfg.Keys sequences (each
//     key's tasks run one at a time, in submit order: a claim takes at
//     most one task per key, and each completion hands its key on);
//   - shaping-batch: plain tasks claimed with min (half the claim size)
//     and a 10 ms linger, the cost of counting before each claim;
//   - shaping-keyrate: the tasks spread over cfg.Keys concurrency keys in
//     a queue whose key_rate_limit cannot bind (each key's bucket holds a
//     million tokens), the cost of keeping a bucket per key.
func Shaping(ctx context.Context, st norn.Store, env Env, cfg Config) ([]Result, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.ClaimBatch <= 0 {
		cfg.ClaimBatch = 1000
	}
	cfg.defaults()
	n := cfg.Tasks
	if n <= 0 {
		n = 100_000
	}
	var out []Result
	for _, pass := range []string{"plain", "sequences", "batch", "keyrate"} {
		r, err := shaping(ctx, st, env, cfg, pass, n)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

func shaping(ctx context.Context, st norn.Store, env Env, cfg Config, pass string, n int) (Result, error) {
	q := queueName(cfg.Queue)
	defer cleanup(ctx, cfg, st, q)
	body := spec(cfg.SpecBytes)
	mk := func(int) norn.NewTask { return norn.NewTask{Queue: q, Spec: body} }
	switch pass {
	case "sequences":
		mk = func(i int) norn.NewTask {
			return norn.NewTask{Queue: q, Spec: body, SequenceKey: "s" + strconv.Itoa(i%cfg.Keys)}
		}
	case "keyrate":
		rl := norn.RateLimit{PerSecond: norn.MaxRatePerSecond, Burst: norn.MaxRateBurst}
		if _, err := st.UpdateQueue(ctx, q, norn.QueueUpdate{KeyRateLimit: &rl}); err != nil {
			return Result{}, err
		}
		mk = func(i int) norn.NewTask {
			return norn.NewTask{Queue: q, Spec: body, ConcurrencyKey: "k" + strconv.Itoa(i%cfg.Keys)}
		}
	}
	workload := "shaping-" + pass
	if err := submitTasks(ctx, st, n, 1000, cfg.Workers, mk, func(d int64) { report(cfg, workload+": submitting", d, int64(n)) }); err != nil {
		return Result{}, err
	}
	if err := settle(ctx, cfg.Settle); err != nil {
		return Result{}, err
	}
	r := env.result(workload)
	req := norn.ClaimRequest{N: cfg.ClaimBatch, Wait: norn.Duration(50 * time.Millisecond)}
	if pass == "batch" {
		req.Min, req.Linger = max(2, cfg.ClaimBatch/2), norn.Duration(10*time.Millisecond)
	}
	if err := burnDownWith(ctx, st, q, n, cfg, &r, req); err != nil {
		return Result{}, err
	}
	r.Workers, r.Batch = cfg.Workers, cfg.ClaimBatch
	if pass == "sequences" || pass == "keyrate" {
		r.Queued = cfg.Keys
	}
	return r, nil
}
