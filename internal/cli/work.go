package cli

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/worker"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// workOptions are the flags of `norn work`.
type workOptions struct {
	queues      []string
	concurrency int
	timeout     time.Duration
	heartbeat   time.Duration
	batch       int
	min         int
	linger      time.Duration
	groupBy     string
	wait        time.Duration
	grace       time.Duration
	killGrace   time.Duration
	maxLoad     float64
	name        string
	dir         string
	verbose     bool
}

func init() {
	register(func(g *Globals) *cobra.Command {
		var o workOptions
		cmd := &cobra.Command{
			Use:   "work -q QUEUE [-q QUEUE...] [-c N] [flags] -- COMMAND [ARGS...]",
			Short: "Run a command once per task claimed from the given queues",
			Long: `Claim tasks from the queues (in preference order) and run COMMAND once per
task, at most -c at a time, heartbeating every running task.

The command gets the task's spec on stdin and NORN_TASK_ID, NORN_QUEUE,
NORN_LEASE, NORN_ATTEMPT and NORN_WORKER in its environment, and TRACEPARENT
(and TRACESTATE) with the W3C trace context of the attempt when the task has
one: spans the command starts under it join the submitter's trace. Tracing
of norn work itself is configured by the OTEL_* variables (docs/tracing.md).
Its outcome:
  exit 0     completes the task; stdout is the result (JSON as is, other text
             as a JSON string, nothing when empty)
  exit 75    fails the task; it is retried per its retry policy
  other      aborts the task for good; the tail of stderr is the error
  a signal   (not sent by norn) fails the task for retry
Lines "progress: 0.4" (or "progress: 40%") on stderr update the progress.
Everything the command writes to stderr is copied to norn's stderr.

When the task is cancelled or its lease lost, the command's whole process
group gets SIGTERM, then SIGKILL after --kill-grace. On SIGTERM or Ctrl-C,
norn stops claiming, lets running commands finish for up to --grace, then
kills them and yields their tasks back to the queue for another worker.

With --min N, COMMAND runs once per chunk of tasks instead, for work that is
cheaper in bulk: every claim waits until N tasks are ready (or, with
--linger, until the one ready longest has waited that long) and takes up to
-c. With --group-by concurrency_key (or label:NAME) every chunk holds tasks
of one key (or one value of the label NAME) only, and --min and --linger
count per key. The command gets one JSON line per task on stdin ({"id", "queue",
"lease", "attempt", "spec", "traceparent"}) and NORN_WORKER and NORN_CHUNK
(the number of tasks) in its environment, and prints one JSON line per task
it decides:
  {"id":"…","result":…}                  completes it (result optional)
  {"id":"…","error":"why","code":"…"}    fails it for retry ("retry_in":"30s")
  {"id":"…","error":"why","abort":true}  aborts it for good
  {"id":"…","snooze":"30s"}              snoozes it (or an RFC 3339 time)
Other lines are ignored. A task without a line gets the exit status's
outcome, as above. Each task keeps its own lease, heartbeated until the
command ends.

Flags after the first argument of COMMAND belong to COMMAND; "--" before
it is optional but clearer.`,
			Example: `  norn work -q thumbnails -c 4 -- ./make-thumbnail.sh
  norn work -q emails -q emails-low --timeout 30s -- python3 send.py
  norn work -q rows -c 500 --min 100 --linger 2s -- ./insert-rows.py
  norn work -q rows -c 500 --min 100 --linger 2s --group-by label:table -- ./insert-rows.py`,
			Args: cobra.MinimumNArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if len(o.queues) == 0 {
					return usagef("at least one queue is required (-q QUEUE)")
				}
				if o.concurrency < 1 {
					return usagef("--concurrency must be at least 1")
				}
				if o.maxLoad < 0 {
					return usagef("--max-load must not be negative")
				}
				switch {
				case o.min < 0:
					return usagef("--min must not be negative")
				case o.min > o.concurrency:
					return usagef("--min %d is more than -c %d: a chunk takes at most -c tasks", o.min, o.concurrency)
				case o.linger < 0:
					return usagef("--linger must not be negative")
				case o.linger > 0 && o.min < 2:
					return usagef("--linger needs --min 2 or more: it bounds how long a chunk waits to gather --min tasks")
				case o.min > 0 && o.batch != 0:
					return usagef("--batch does not apply with --min: a chunk takes up to -c tasks")
				case o.groupBy != "" && o.min < 1:
					return usagef("--group-by needs --min 1 or more: it groups the tasks of a chunk")
				}
				if err := norn.ValidateGroupBy("--group-by", o.groupBy); err != nil {
					return usagef("%v", err)
				}
				return withClient(g, func(c *client.Client) error { return runWork(cmd, c, &o, args) })
			},
		}
		o.add(cmd.Flags())
		return clientCommand(cmd)
	})
}

// parseWeightedQueues reads -q values: QUEUE, or QUEUE=WEIGHT to share
// claims by weight instead of the strict order (a queue without a weight
// then weighs 1). weights is nil when no value gives one.
func parseWeightedQueues(vals []string) (queues []string, weights map[string]int, err error) {
	for _, v := range vals {
		name, w, ok := strings.Cut(v, "=")
		queues = append(queues, name)
		if !ok {
			continue
		}
		n, err := strconv.Atoi(w)
		if err != nil || n < 1 || n > norn.MaxWeight {
			return nil, nil, usagef("-q %s: the weight must be a whole number from 1 to %d, e.g. -q emails=3 -q reports=1", v, norn.MaxWeight)
		}
		if weights == nil {
			weights = map[string]int{}
		}
		weights[name] = n
	}
	return queues, weights, nil
}

func (o *workOptions) add(f *pflag.FlagSet) {
	// Everything from COMMAND on is COMMAND's, e.g. `norn work -q x sh -c ...`.
	f.SetInterspersed(false)
	f.StringArrayVarP(&o.queues, "queue", "q", nil, "queue to claim from (repeatable; earlier queues are preferred, or QUEUE=WEIGHT to share claims by weight)")
	f.IntVarP(&o.concurrency, "concurrency", "c", 1, "most commands running at once")
	f.DurationVar(&o.timeout, "timeout", 0, "lease length requested per claim and heartbeat (0 = each task's own timeout)")
	f.DurationVar(&o.heartbeat, "heartbeat", 0, "heartbeat interval (0 = a third of the lease)")
	f.IntVar(&o.batch, "batch", 0, fmt.Sprintf("most tasks per claim (0 = %d, never more than free slots)", worker.DefaultClaimBatch))
	f.IntVar(&o.min, "min", 0, "run COMMAND once per chunk of tasks, claimed once this many are ready (see above; 0 = once per task)")
	f.DurationVar(&o.linger, "linger", 0, "with --min: how long a ready task waits for --min to gather before a smaller chunk runs (0 = until --min are ready)")
	f.StringVar(&o.groupBy, "group-by", "", "with --min: every chunk holds tasks of one concurrency_key, or of one value of label:NAME")
	f.DurationVar(&o.wait, "wait", 0, fmt.Sprintf("long-poll wait per claim (0 = %s)", worker.DefaultWait))
	f.DurationVar(&o.grace, "grace", worker.DefaultShutdownGrace, "on SIGTERM/Ctrl-C, how long running commands may finish before they are killed and their tasks yielded")
	f.DurationVar(&o.killGrace, "kill-grace", 5*time.Second, "after SIGTERM to a cancelled command's process group, wait this long before SIGKILL (0 = SIGKILL at once)")
	f.Float64Var(&o.maxLoad, "max-load", 0, "claim only while the 1-minute load average per CPU is below this (Linux; 0 = no limit)")
	f.StringVar(&o.name, "name", "", "worker name shown to operators (default host:pid)")
	f.StringVar(&o.dir, "dir", "", "working directory of the command (default the current one)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log every task outcome")
}

// runWork runs the worker of norn work until the command's context ends.
func runWork(cmd *cobra.Command, c *client.Client, o *workOptions, args []string) error {
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	tp, stopTracing, err := startTracing(cmd.Context(), "norn-work", logger)
	if err != nil {
		return usagef("%v", err)
	}
	defer stopTracing()
	queues, weights, err := parseWeightedQueues(o.queues)
	if err != nil {
		return err
	}
	cfg := worker.Config{
		Handler: &worker.Command{
			Path:      args[0],
			Args:      args[1:],
			Dir:       o.dir,
			Stderr:    cmd.ErrOrStderr(),
			KillGrace: o.killGrace,
		},
		Queues:            queues,
		Weights:           weights,
		Concurrency:       o.concurrency,
		Lease:             o.timeout,
		HeartbeatInterval: o.heartbeat,
		ClaimBatch:        o.batch,
		Wait:              o.wait,
		ShutdownGrace:     o.grace,
		Name:              o.name,
		Logger:            logger,
		TracerProvider:    tp.TracerProvider(),
	}
	if o.grace == 0 {
		cfg.ShutdownGrace = -1 // --grace 0 means yield at once
	}
	if o.min > 0 {
		cfg.Chunk = &worker.Chunk{Handler: (*worker.ChunkCommand)(cfg.Handler.(*worker.Command)), Min: o.min, Linger: o.linger,
			GroupBy: o.groupBy}
		cfg.Handler = nil
	}
	if o.maxLoad > 0 {
		cfg.Capacity = worker.LoadBelow(o.maxLoad)
	}
	w, err := worker.New(c, cfg)
	if err != nil {
		return usagef("%s", messageOf(err))
	}
	ctx := cmd.Context()
	go func() {
		<-ctx.Done()
		logger.Info("shutting down: no new tasks; running commands may finish", "grace", o.grace)
	}()
	if err := w.Run(ctx); err != nil {
		return fmt.Errorf("work: %w", err)
	}
	return nil
}
