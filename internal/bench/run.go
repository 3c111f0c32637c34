package bench

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/nornq/norn"
)

// Workloads lists the workload names Run accepts, in the order "all" runs
// them: the cheap ones first so a broken setup fails fast, memory last
// because it leaves the process heap grown.
var Workloads = []string{"submit", "work", "latency", "delay", "scale", "memory"}

// Extra lists workloads Run accepts that "all" leaves out: kafka measures
// the Kafka bridge, not the store; fairness queues a backlog of a million
// tasks twice.
var Extra = []string{"kafka", "fairness", "shaping"}

// Run runs one workload by name and returns its results (submit and scale
// return one result per batch size or backlog, the others one).
func Run(ctx context.Context, name string, st norn.Store, env Env, cfg Config) ([]Result, error) {
	one := func(r Result, err error) ([]Result, error) {
		if err != nil {
			return nil, err
		}
		return []Result{r}, nil
	}
	switch name {
	case "submit":
		return Submit(ctx, st, env, cfg)
	case "work":
		return one(Work(ctx, st, env, cfg))
	case "latency":
		return one(Latency(ctx, st, env, cfg))
	case "delay":
		return one(Delay(ctx, st, env, cfg))
	case "scale":
		return Scale(ctx, st, env, cfg)
	case "memory":
		return one(Memory(ctx, st, env, cfg))
	case "kafka":
		return one(Kafka(ctx, st, env, cfg))
	case "fairness":
		return Fairness(ctx, st, env, cfg)
	case "shaping":
		return Shaping(ctx, st, env, cfg)
	}
	return nil, norn.Invalid("workload", "unknown workload %q (want one of %v or all)", name, Workloads)
}

// Median combines repeated runs of one workload into one set of results:
// result i of the output holds, for every measured figure, the median over
// the runs of result i. Median figures are taken independently, so a row is
// not necessarily one of the runs; that is what "median of K runs" means for
// each column. Runs must have the same shape (same length, same workload).
func Median(runs [][]Result) ([]Result, error) {
	if len(runs) == 0 {
		return nil, nil
	}
	out := make([]Result, len(runs[0]))
	for i := range out {
		col := make([]Result, len(runs))
		for k, run := range runs {
			if len(run) != len(runs[0]) || run[i].Workload != runs[0][i].Workload {
				return nil, fmt.Errorf("run %d has a different shape from run 0", k)
			}
			col[k] = run[i]
		}
		r := col[0]
		med := func(get func(*Result) *float64) {
			vals := make([]float64, len(col))
			for k := range col {
				vals[k] = *get(&col[k])
			}
			*get(&r) = medianOf(vals)
		}
		med(func(r *Result) *float64 { return &r.Seconds })
		med(func(r *Result) *float64 { return &r.TasksPerS })
		med(func(r *Result) *float64 { return &r.P50ms })
		med(func(r *Result) *float64 { return &r.P99ms })
		med(func(r *Result) *float64 { return &r.P999ms })
		med(func(r *Result) *float64 { return &r.Maxms })
		med(func(r *Result) *float64 { return &r.EarlyPct })
		med(func(r *Result) *float64 { return &r.EarlyOver5msPct })
		med(func(r *Result) *float64 { return &r.EarlyP999ms })
		med(func(r *Result) *float64 { return &r.MaxEarlyms })
		med(func(r *Result) *float64 { return &r.RSSMiB })
		med(func(r *Result) *float64 { return &r.Rate })
		med(func(r *Result) *float64 { return &r.CPUSeconds })
		med(func(r *Result) *float64 { return &r.TasksPerCPUSec })
		r.Runs = len(runs)
		out[i] = r
	}
	// The scale ratio is recomputed from the median throughputs so it
	// agrees with the rows printed next to it.
	if n := len(out); n > 1 && out[n-1].Workload == "scale" && out[0].TasksPerS > 0 {
		out[n-1].Ratio = out[n-1].TasksPerS / out[0].TasksPerS
	}
	return out, nil
}

// medianOf returns the median (the mean of the middle two for an even count).
func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}
