package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// parseLabels parses key=value pairs (key:value is accepted too, as in the
// API's label filter). Keys must be non-empty; a later duplicate key is an
// error rather than a silent overwrite.
func parseLabels(pairs []string) (map[string]string, error) {
	out := make(map[string]string, len(pairs))
	for _, p := range pairs {
		i := strings.IndexAny(p, "=:")
		if i < 0 {
			return nil, fmt.Errorf("label %q must look like key=value", p)
		}
		k, v := p[:i], p[i+1:]
		if k == "" {
			return nil, fmt.Errorf("label %q has an empty key", p)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label key %q given twice", k)
		}
		out[k] = v
	}
	if err := norn.ValidateLabels("labels", out); err != nil {
		return nil, errors.New(messageOf(err))
	}
	return out, nil
}

// maxBatchLine bounds one NDJSON line: a 1 MiB spec plus JSON escaping and
// the other fields.
const maxBatchLine = 4 << 20

// parseBatchLine decodes one NDJSON line of `submit --batch` into a NewTask.
// Unknown fields are rejected (a typo must not silently drop a setting),
// defaultQueue fills a missing queue, and the task is validated so the
// error can name the line instead of a batch index.
func parseBatchLine(line []byte, defaultQueue string) (norn.NewTask, error) {
	var nt norn.NewTask
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&nt); err != nil {
		return nt, fmt.Errorf("not a task object: %v", err)
	}
	if dec.More() {
		return nt, errors.New("more than one JSON value on the line")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nt, errors.New("trailing data after the task object")
	}
	if nt.Queue == "" {
		nt.Queue = defaultQueue
	}
	if err := nt.Validate(); err != nil {
		return nt, err
	}
	return nt, nil
}

// submitFlags are the per-task settings of `norn submit`.
type submitFlags struct {
	id          string
	file        string
	priority    uint32
	labels      []string
	delay       time.Duration
	runAt       string
	dependsOn   []string
	onDepFail   string
	retry       retryFlags
	maxAttempts int
	timeout     time.Duration
	maxRuntime  time.Duration
	uniqueKey   string
	uniqueFor   time.Duration
	expireIn    time.Duration
	expiresAt   string
	sequenceKey string
	onDuplicate string
	debounceMax time.Duration
	batch       string
	inBatch     string
	chunk       int
}

func init() {
	register(func(g *Globals) *cobra.Command {
		sf := &submitFlags{}
		cmd := &cobra.Command{
			Use:   "submit QUEUE [SPEC]",
			Short: "Submit a task (spec from an argument, --file or stdin) or a batch (--batch)",
			Long: `Submit one task to QUEUE. The spec is any JSON value, taken from the SPEC
argument, from --file (- for stdin), or from stdin when it is piped; with
none of these the task has no spec.

With --batch FILE.ndjson, every line of the file is a task object in the
API's form ({"queue":"q","spec":{…},"priority":5,…}); QUEUE, if given, fills
in lines without a queue. Lines are submitted in chunks of --chunk tasks,
each chunk atomically, with a progress bar on stderr. Dependencies may point
to tasks in earlier chunks or the same chunk; give depends_on and
on_dependency_failure per line.

With --on-dependency-failure run, a task with --depends-on runs once every
dependency ended, whatever the outcome (the default, abort, aborts it when a
dependency fails); 'norn get' shows each dependency's outcome.

With --sequence-key K the task joins the sequence of QUEUE and K: its tasks
run one at a time, in submit order whatever their priority (see 'norn
sequence'); such a task cannot have --depends-on.

With --in-batch ID the task joins that batch (see 'norn batch'), which must
exist and not be sealed; with --batch FILE it fills in lines without a batch.

Submitting an id that already exists changes nothing and reports the
existing task as a duplicate (exit code 0). So does --unique-key while a task
of the queue with that key is not terminal (or, with --unique-for, ended less
than that long ago): the task holding the key is reported instead.

With --on-duplicate replace (debounce), a held --unique-key replaces instead:
a holder that has not started takes this submit's spec, labels, priority and
run time (--delay or --run-at, at most --debounce-max after the holder was
first submitted); its id stays and it is reported as replaced. A holder that
is already running, or waiting for a retry, is left alone: the task is
submitted as its successor, which waits for the holder to end (whatever the
outcome) and takes the key, so a later replace replaces the successor.`,
			Example: `  norn submit emails '{"to":"a@example.com"}'
  norn submit emails --file mail.json --priority 10 --label tenant=acme
  echo '{"n":1}' | norn submit numbers --delay 5m --retry 3
  norn submit reports '{"month":"2026-10"}' --timeout 30s --max-runtime 10m
  norn submit reports '{"user":42}' --unique-key report-user-42 --unique-for 1h
  norn submit reindex '{"doc":7}' --unique-key doc-7 --on-duplicate replace --delay 2s --debounce-max 1m
  norn submit otp '{"to":"+4512345678"}' --expire-in 5m --retry 3 --retry-jitter full
  norn submit report '{}' --depends-on fetch-a,fetch-b --on-dependency-failure run
  norn submit ledger '{"op":"deposit","amount":10}' --sequence-key account-7
  norn submit --batch tasks.ndjson
  norn submit thumbnails '{"image":7}' --in-batch import-42`,
			Args: cobra.RangeArgs(0, 2),
			RunE: func(cmd *cobra.Command, args []string) error {
				if sf.batch != "" {
					if len(args) > 1 {
						return usagef("--batch takes at most a default QUEUE argument, not a spec")
					}
					q := ""
					if len(args) == 1 {
						q = args[0]
					}
					return runSubmitBatch(cmd, g, sf, q)
				}
				if len(args) == 0 {
					return usagef("submit needs a QUEUE (or --batch FILE)")
				}
				return runSubmit(cmd, g, sf, args)
			},
		}
		fs := cmd.Flags()
		fs.StringVar(&sf.id, "id", "", "task id (makes the submit idempotent; default a UUIDv7)")
		fs.StringVarP(&sf.file, "file", "f", "", "read the spec from this file (- for stdin)")
		fs.Uint32VarP(&sf.priority, "priority", "p", 0, "priority (higher runs first)")
		fs.StringArrayVarP(&sf.labels, "label", "l", nil, "label key=value (repeatable)")
		fs.DurationVar(&sf.delay, "delay", 0, "run no earlier than this long from now (e.g. 30s, 5m)")
		fs.StringVar(&sf.runAt, "run-at", "", "run no earlier than this time (RFC 3339)")
		fs.StringSliceVar(&sf.dependsOn, "depends-on", nil, "ids this task waits for (repeatable or comma-separated)")
		fs.StringVar(&sf.onDepFail, "on-dependency-failure", "", "when a dependency fails: abort (the default: abort this task too) or run (run once every dependency ended, whatever the outcome)")
		sf.retry.add(fs, "retries after a failure (default: the queue's policy)")
		fs.IntVar(&sf.maxAttempts, "max-attempts", 0, "abort after this many attempts (default: the queue's; 0 with the flag given = unlimited)")
		fs.DurationVar(&sf.timeout, "timeout", 0, "lease length per attempt (default: the queue's, 10s)")
		fs.DurationVar(&sf.maxRuntime, "max-runtime", 0, "stop an attempt after this long even while it heartbeats (default: the queue's, none)")
		fs.StringVar(&sf.uniqueKey, "unique-key", "", "submit nothing while a task of the queue with this key is not terminal")
		fs.DurationVar(&sf.uniqueFor, "unique-for", 0, "with --unique-key: also while one ended less than this long ago")
		fs.DurationVar(&sf.expireIn, "expire-in", 0, "abort the task (expired) if it has not started this long after it may first run (e.g. 5m)")
		fs.StringVar(&sf.expiresAt, "expires-at", "", "abort the task (expired) if it has not started by this time (RFC 3339)")
		fs.StringVar(&sf.onDuplicate, "on-duplicate", "", "when --unique-key is held: keep (the default: submit nothing) or replace (debounce: update a holder that has not started, else queue this task after it)")
		fs.DurationVar(&sf.debounceMax, "debounce-max", 0, "with --on-duplicate replace: move the holder's run time at most this long after it was first submitted")
		fs.StringVar(&sf.sequenceKey, "sequence-key", "", "run one at a time, in submit order, with the queue's other tasks of this key")
		fs.StringVar(&sf.batch, "batch", "", "submit every task of this NDJSON file (- for stdin)")
		fs.StringVar(&sf.inBatch, "in-batch", "", "join this batch (norn batch create); with --batch, for lines without one")
		fs.IntVar(&sf.chunk, "chunk", 1000, "tasks per request with --batch (1..10000)")
		return clientCommand(cmd)
	})
}

// newTask builds the NewTask of a single submit from flags and arguments.
func (sf *submitFlags) newTask(cmd *cobra.Command, args []string, stdin io.Reader, stdinPiped bool) (norn.NewTask, error) {
	nt := norn.NewTask{ID: sf.id, Queue: args[0], Priority: sf.priority, DependsOn: sf.dependsOn,
		Delay: norn.Duration(sf.delay), Timeout: norn.Duration(sf.timeout), MaxRuntime: norn.Duration(sf.maxRuntime),
		UniqueKey: sf.uniqueKey, UniqueFor: norn.Duration(sf.uniqueFor), ExpireIn: norn.Duration(sf.expireIn),
		Batch: sf.inBatch, OnDependencyFailure: sf.onDepFail, SequenceKey: sf.sequenceKey,
		OnDuplicate: sf.onDuplicate, DebounceMax: norn.Duration(sf.debounceMax)}
	if err := sf.checkInBatch(); err != nil {
		return nt, err
	}
	if err := norn.ValidateOnDependencyFailure("on_dependency_failure", sf.onDepFail); err != nil {
		return nt, usagef("--on-dependency-failure: %v", messageOf(err))
	}
	if sf.onDepFail != "" && len(sf.dependsOn) == 0 {
		return nt, usagef("--on-dependency-failure needs --depends-on")
	}
	spec, err := sf.readSpec(args, stdin, stdinPiped)
	if err != nil {
		return nt, err
	}
	nt.Spec = spec
	if len(sf.labels) > 0 {
		l, err := parseLabels(sf.labels)
		if err != nil {
			return nt, usagef("--label: %v", err)
		}
		nt.Labels = l
	}
	if sf.runAt != "" {
		t, err := time.Parse(time.RFC3339Nano, sf.runAt)
		if err != nil {
			return nt, usagef("--run-at: %q is not an RFC 3339 time (like 2030-01-02T15:04:05Z)", sf.runAt)
		}
		nt.RunAt = t.UTC()
		if err := checkTime("run-at", nt.RunAt); err != nil {
			return nt, err
		}
	}
	if sf.expiresAt != "" {
		if sf.expireIn != 0 {
			return nt, usagef("give --expire-in or --expires-at, not both")
		}
		t, err := time.Parse(time.RFC3339Nano, sf.expiresAt)
		if err != nil {
			return nt, usagef("--expires-at: %q is not an RFC 3339 time (like 2030-01-02T15:04:05Z)", sf.expiresAt)
		}
		nt.ExpiresAt = t.UTC()
		if err := checkTime("expires-at", nt.ExpiresAt); err != nil {
			return nt, err
		}
	}
	if sf.delay < 0 || sf.timeout < 0 || sf.maxRuntime < 0 || sf.retry.base < 0 || sf.retry.max < 0 || sf.uniqueFor < 0 || sf.expireIn < 0 || sf.debounceMax < 0 {
		return nt, usagef("durations must not be negative")
	}
	if err := checkDurations(durationFlag{"delay", sf.delay}, durationFlag{"timeout", sf.timeout}, durationFlag{"max-runtime", sf.maxRuntime},
		durationFlag{"retry-base", sf.retry.base}, durationFlag{"retry-max", sf.retry.max}, durationFlag{"unique-for", sf.uniqueFor},
		durationFlag{"expire-in", sf.expireIn}, durationFlag{"debounce-max", sf.debounceMax}); err != nil {
		return nt, err
	}
	if err := sf.checkDebounce(); err != nil {
		return nt, err
	}
	if sf.uniqueFor > 0 && sf.uniqueKey == "" {
		return nt, usagef("--unique-for needs --unique-key")
	}
	if sf.uniqueKey != "" {
		if err := norn.ValidateUniqueKey("unique_key", sf.uniqueKey); err != nil {
			return nt, usagef("--unique-key: %v", messageOf(err))
		}
	}
	if sf.sequenceKey != "" {
		if err := norn.ValidateSequenceKey("sequence_key", sf.sequenceKey); err != nil {
			return nt, usagef("--sequence-key: %v", messageOf(err))
		}
		if len(sf.dependsOn) > 0 {
			return nt, usagef("--sequence-key and --depends-on do not go together: the sequence orders the task")
		}
	}
	if nt.Retry, err = sf.retry.policy(cmd.Flags()); err != nil {
		return nt, err
	}
	if nt.MaxAttempts, err = givenCount(cmd.Flags(), "max-attempts", sf.maxAttempts); err != nil {
		return nt, err
	}
	return nt, nil
}

// checkDebounce refuses --on-duplicate and --debounce-max that the server
// would refuse, naming the flags.
func (sf *submitFlags) checkDebounce() error {
	switch sf.onDuplicate {
	case "", norn.DuplicateKeep:
	case norn.DuplicateReplace:
		if sf.uniqueKey == "" {
			return usagef("--on-duplicate replace needs --unique-key: the key says which task to replace")
		}
		if sf.sequenceKey != "" {
			return usagef("--on-duplicate replace and --sequence-key do not go together")
		}
	default:
		return usagef("--on-duplicate must be keep or replace, not %q", sf.onDuplicate)
	}
	if sf.debounceMax > 0 && sf.onDuplicate != norn.DuplicateReplace {
		return usagef("--debounce-max needs --on-duplicate replace")
	}
	return nil
}

// successorOf is the holder a replacing submit s became the successor of
// (the dependency the server added), or "" when s is not one.
func successorOf(nt norn.NewTask, s norn.Submitted) string {
	if nt.OnDuplicate != norn.DuplicateReplace || s.Duplicate || len(s.Task.DependsOn) == 0 {
		return ""
	}
	holder := s.Task.DependsOn[len(s.Task.DependsOn)-1]
	if slices.Contains(nt.DependsOn, holder) {
		return ""
	}
	return holder
}

// readSpec reads a single submit's spec: the argument, --file (- for
// stdin) or piped stdin; nil when none is given.
func (sf *submitFlags) readSpec(args []string, stdin io.Reader, stdinPiped bool) (json.RawMessage, error) {
	var spec []byte
	switch {
	case len(args) == 2:
		if sf.file != "" {
			return nil, usagef("give the spec as an argument or with --file, not both")
		}
		spec = []byte(args[1])
	case sf.file == "-" || (sf.file == "" && stdinPiped):
		b, err := io.ReadAll(io.LimitReader(stdin, norn.MaxSpecBytes+1))
		if err != nil {
			return nil, fmt.Errorf("reading the spec from stdin: %w", err)
		}
		spec = b
	case sf.file != "":
		b, err := os.ReadFile(sf.file)
		if err != nil {
			return nil, fmt.Errorf("reading the spec: %w", err)
		}
		spec = b
	}
	spec = bytes.TrimSpace(spec)
	if len(spec) == 0 {
		return nil, nil
	}
	if err := specError(spec); err != nil {
		return nil, err
	}
	return spec, nil
}

// checkInBatch refuses a malformed --in-batch before anything is read or sent.
func (sf *submitFlags) checkInBatch() error {
	if sf.inBatch == "" {
		return nil
	}
	if err := norn.ValidateBatchID("batch", sf.inBatch); err != nil {
		return usagef("--in-batch: %v", messageOf(err))
	}
	return nil
}

// retryFlags are --retry, --retry-base and --retry-max, which together give
// a retry policy.
type retryFlags struct {
	retries   int
	base, max time.Duration
	jitter    string
}

// add defines the flags; help is --retry's.
func (rf *retryFlags) add(fs *pflag.FlagSet, help string) {
	fs.IntVar(&rf.retries, "retry", 0, help)
	fs.DurationVar(&rf.base, "retry-base", time.Second, "first retry backoff, doubled each retry (with --retry)")
	fs.DurationVar(&rf.max, "retry-max", time.Hour, "backoff cap (with --retry; 0 = no cap)")
	fs.StringVar(&rf.jitter, "retry-jitter", "", "spread the backoffs: none, full (0 to the backoff) or equal (half to all of it) (with --retry)")
}

// policy is the policy the flags give, nil without --retry. --retry-base or
// --retry-max without --retry is a usage error, as it would change nothing.
func (rf *retryFlags) policy(fs *pflag.FlagSet) (*norn.RetryPolicy, error) {
	if !fs.Changed("retry") {
		if fs.Changed("retry-base") || fs.Changed("retry-max") || fs.Changed("retry-jitter") {
			return nil, usagef("--retry-base, --retry-max and --retry-jitter need --retry, e.g. --retry 5 --retry-jitter full")
		}
		return nil, nil
	}
	if rf.retries < 0 {
		return nil, usagef("--retry must not be negative")
	}
	if err := norn.ValidateCount("--retry", rf.retries); err != nil {
		return nil, usagef("%v", err)
	}
	if err := checkDurations(durationFlag{"retry-base", rf.base}, durationFlag{"retry-max", rf.max}); err != nil {
		return nil, err
	}
	p := &norn.RetryPolicy{MaxRetries: rf.retries, Base: norn.Duration(rf.base), Max: norn.Duration(rf.max), Jitter: rf.jitter}
	if err := norn.ValidateRetry("retry", p); err != nil {
		return nil, usagef("--retry-jitter: %q is not a jitter mode: use none, full or equal", rf.jitter)
	}
	return p, nil
}

// givenCount is an int flag that may be left out: nil when it was not
// given; a negative value is a usage error.
func givenCount(fs *pflag.FlagSet, name string, v int) (*int, error) {
	if !fs.Changed(name) {
		return nil, nil
	}
	if v < 0 {
		return nil, usagef("--%s must not be negative", name)
	}
	if err := norn.ValidateCount("--"+name, v); err != nil {
		return nil, usagef("%v", err)
	}
	return &v, nil
}

func runSubmit(cmd *cobra.Command, g *Globals, sf *submitFlags, args []string) error {
	format, err := outputFormat(g)
	if err != nil {
		return err
	}
	nt, err := sf.newTask(cmd, args, cmd.InOrStdin(), stdinPiped())
	if err != nil {
		return err
	}
	return withClient(g, func(c *client.Client) error {
		subs, err := c.Submit(cmd.Context(), nt)
		if err != nil {
			return singleSubmitError(err)
		}
		s := subs[0]
		if format != outTable {
			return emit(cmd.OutOrStdout(), format, s)
		}
		if s.Replaced {
			fmt.Fprintf(cmd.OutOrStdout(), "%s replaced: it holds unique key %q and had not started; it now runs this spec at %s (queue %s, status %s, version %d)\n",
				s.Task.ID, nt.UniqueKey, s.Task.RunAt.UTC().Format(time.RFC3339Nano), s.Task.Queue, s.Task.Status, s.Task.Version)
			return nil
		}
		if s.Duplicate && (nt.ID == "" || s.Task.ID != nt.ID) {
			fmt.Fprintf(cmd.OutOrStdout(), "%s holds unique key %q (queue %s, status %s); nothing submitted\n", s.Task.ID, nt.UniqueKey, s.Task.Queue, s.Task.Status)
			return nil
		}
		if s.Duplicate {
			fmt.Fprintf(cmd.OutOrStdout(), "%s already exists (queue %s, status %s); nothing changed\n", s.Task.ID, s.Task.Queue, s.Task.Status)
			return nil
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s submitted to %s (%s)\n", s.Task.ID, s.Task.Queue, s.Task.Status)
		if h := successorOf(nt, s); h != "" {
			fmt.Fprintf(cmd.OutOrStdout(), "  the successor of %s, which holds unique key %q and has started: it runs once %s ends (whatever the outcome) and now holds the key\n", h, nt.UniqueKey, h)
		}
		// A paused queue takes tasks but hands none out: say so, once, at
		// the cost of one read (a single submit is interactive).
		if q, err := c.Queue(cmd.Context(), s.Task.Queue); err == nil && q.Paused {
			fmt.Fprintf(cmd.ErrOrStderr(), "note: queue %s is paused: its tasks wait until 'norn queues resume %s'\n", q.Name, q.Name)
		}
		return nil
	})
}

// singleSubmitError speaks of what the user gave: the batch position a
// one-task submit travels in ("tasks[0].queue") is left out.
func singleSubmitError(err error) error {
	var ne *norn.Error
	if !errors.As(err, &ne) {
		return err
	}
	c := *ne
	// The client sends even one task on the batch route: a refusal names
	// the route the user never called.
	c.Message = strings.ReplaceAll(c.Message, "POST /v1/tasks/batch", "submit tasks")
	c.Field = strings.TrimPrefix(strings.TrimPrefix(c.Field, "tasks[0]"), ".")
	if c.Field == "batch" {
		c.Field = "--in-batch" // the only way a single submit names a batch
	}
	return &c
}

// batchResult summarises a batch submit.
type batchResult struct {
	Submitted  int `json:"submitted"`
	Duplicates int `json:"duplicates"`
	// Replaced counts the duplicates (on_duplicate replace) that
	// replaced the task holding their unique key.
	Replaced int     `json:"replaced"`
	Seconds  float64 `json:"seconds"`
}

func runSubmitBatch(cmd *cobra.Command, g *Globals, sf *submitFlags, defaultQueue string) error {
	format, err := outputFormat(g)
	if err != nil {
		return err
	}
	if sf.chunk < 1 || sf.chunk > norn.MaxBatch {
		return usagef("--chunk must be between 1 and %d", norn.MaxBatch)
	}
	if sf.file != "" || sf.id != "" || sf.uniqueKey != "" || sf.uniqueFor != 0 || sf.onDuplicate != "" || sf.debounceMax != 0 {
		return usagef("--batch cannot be combined with --file, --id or --unique-key/--unique-for/--on-duplicate/--debounce-max (give them per line)")
	}
	if len(sf.dependsOn) > 0 || sf.onDepFail != "" {
		// Silently dropping them would submit tasks that run too early.
		return usagef("--batch cannot be combined with --depends-on or --on-dependency-failure (give depends_on and on_dependency_failure per line)")
	}
	if sf.sequenceKey != "" {
		// Dropping it would run the lines out of order.
		return usagef("--batch cannot be combined with --sequence-key (give sequence_key per line)")
	}
	if err := sf.checkInBatch(); err != nil {
		return err
	}
	var in io.Reader = cmd.InOrStdin()
	var total int64
	if sf.batch != "-" {
		f, err := os.Open(sf.batch)
		if err != nil {
			return fmt.Errorf("--batch: %w", err)
		}
		defer f.Close()
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			total = fi.Size()
		}
		in = f
	}
	return withClient(g, func(c *client.Client) error {
		bar := NewProgress(cmd.ErrOrStderr(), "submitting", "tasks", total)
		res, err := submitBatch(cmd.Context(), c, in, defaultQueue, sf.inBatch, sf.chunk, bar)
		if err != nil {
			bar.Clear()
			if res.Submitted > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "norn: %d tasks were submitted before the error (%d duplicates)\n", res.Submitted, res.Duplicates)
			}
			return err
		}
		bar.Finish()
		if format != outTable {
			return emit(cmd.OutOrStdout(), format, res)
		}
		if res.Replaced > 0 {
			fmt.Fprintf(cmd.OutOrStdout(), "submitted %d tasks (%d duplicates, %d of them replaced) in %.1fs\n", res.Submitted, res.Duplicates, res.Replaced, res.Seconds)
			return nil
		}
		fmt.Fprintf(cmd.OutOrStdout(), "submitted %d tasks (%d duplicates) in %.1fs\n", res.Submitted, res.Duplicates, res.Seconds)
		return nil
	})
}

// countingReader counts bytes read, for the progress bar.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// submitBatch reads NDJSON tasks from in and submits them chunk by chunk,
// holding one chunk in memory at a time; defaultBatch is the batch of the
// lines that name none.
func submitBatch(ctx context.Context, c *client.Client, in io.Reader, defaultQueue, defaultBatch string, chunk int, bar *Progress) (batchResult, error) {
	start := time.Now()
	var res batchResult
	cr := &countingReader{r: in}
	sc := bufio.NewScanner(cr)
	sc.Buffer(make([]byte, 0, 64<<10), maxBatchLine)
	buf := make([]norn.NewTask, 0, chunk)
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		subs, err := c.Submit(ctx, buf...)
		if err != nil {
			return err
		}
		for _, s := range subs {
			if s.Duplicate {
				res.Duplicates++
			}
			if s.Replaced {
				res.Replaced++
			}
		}
		res.Submitted += len(subs)
		buf = buf[:0]
		bar.Set(cr.n, int64(res.Submitted))
		return nil
	}
	// lines maps an index in the chunk back to its input line for error messages.
	lines := make([]int, 0, chunk)
	lineNo := 0
	for sc.Scan() {
		lineNo++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		nt, err := parseBatchLine(line, defaultQueue)
		if err != nil {
			return res, usagef("line %d: %v", lineNo, err)
		}
		if nt.Batch == "" {
			nt.Batch = defaultBatch
		}
		buf = append(buf, nt)
		lines = append(lines, lineNo)
		if len(buf) == chunk {
			if err := flush(); err != nil {
				return res, atLine(err, lines)
			}
			lines = lines[:0]
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return res, usagef("line %d: longer than %d bytes", lineNo+1, maxBatchLine)
		}
		return res, fmt.Errorf("reading the batch: %w", err)
	}
	if err := flush(); err != nil {
		return res, atLine(err, lines)
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// atLine rewrites a server error naming "tasks[i].field" to name the input
// line instead, which is what the user can find in the file.
func atLine(err error, lines []int) error {
	var ne *norn.Error
	if !errors.As(err, &ne) || !strings.HasPrefix(ne.Field, "tasks[") {
		return err
	}
	end := strings.IndexByte(ne.Field, ']')
	var i int
	if end < 0 {
		return err
	}
	if _, e := fmt.Sscanf(ne.Field[len("tasks["):end], "%d", &i); e != nil || i < 0 || i >= len(lines) {
		return err
	}
	c := *ne
	c.Field = fmt.Sprintf("line %d", lines[i])
	if rest := strings.TrimPrefix(ne.Field[end+1:], "."); rest != "" {
		c.Field += ", " + rest
	}
	return &c
}

// durationFlag is a duration flag and its value, for checkDurations.
type durationFlag struct {
	name string
	d    time.Duration
}

// checkDurations refuses, naming the flag, a duration the stores cannot
// hold (over norn.MaxDuration), before anything is sent.
func checkDurations(flags ...durationFlag) error {
	for _, f := range flags {
		if err := norn.ValidateDuration("--"+f.name, norn.Duration(f.d)); err != nil {
			return usagef("%v", err)
		}
	}
	return nil
}

// checkTime refuses, naming the flag, a time the stores cannot hold.
func checkTime(flag string, t time.Time) error {
	if err := norn.ValidateTime("--"+flag, t); err != nil {
		return usagef("%v", err)
	}
	return nil
}

// specError says where a spec stops being JSON and what to do about it.
func specError(spec []byte) error {
	var v any
	err := json.Unmarshal(spec, &v)
	if err == nil {
		return nil
	}
	if !strings.ContainsRune(`{["-0123456789tfn`, rune(spec[0])) {
		return usagef("the spec is not JSON: a text spec needs quotes, e.g. norn submit q '\"hello\"' (or a JSON object: '{\"to\":\"a@example.com\"}')")
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := 1, 1
		for _, c := range spec[:min(int(se.Offset), len(spec))] {
			if c == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
		}
		return usagef("the spec is not valid JSON at line %d, column %d: %v", line, max(col-1, 1), se)
	}
	return usagef("the spec is not valid JSON: %v", err)
}
