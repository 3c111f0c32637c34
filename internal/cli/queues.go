package cli

import (
	"context"
	"errors"
	"math"

	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		cmd := &cobra.Command{
			Use:   "queues",
			Short: "List queues with counts; pause, resume or configure one",
			Long: `List every queue with its task counts by status, whether it is paused, and
its defaults. Subcommands pause and resume claiming and change the defaults
applied to tasks that do not set their own (admin role).`,
			Example: `  norn queues
  norn queues pause emails
  norn queues set emails --timeout 30s --max-attempts 5 --retention-completed 1h`,
			Args: cobra.NoArgs,
			RunE: clientRun(g, func(cmd *cobra.Command, args []string, format string, c *client.Client) error {
				qs, err := c.Queues(cmd.Context())
				if err != nil {
					return err
				}
				return printQueues(cmd.OutOrStdout(), format, qs)
			}),
		}
		cmd.AddCommand(
			clientCommand(queueGetCmd(g)),
			clientCommand(queuePauseCmd(g, true)),
			clientCommand(queuePauseCmd(g, false)),
			clientCommand(queueSetCmd(g)),
		)
		return clientCommand(cmd)
	})
}

func printQueues(w io.Writer, format string, qs []norn.QueueInfo) error {
	if format != outTable {
		return emitAll(w, format, qs)
	}
	header := append([]string{"QUEUE", "PAUSED"}, statusHeader()...)
	header = append(header, "TIMEOUT", "MAX_ATTEMPTS", "RETRIES", "MAX_RUNTIME")
	tab := newTable(w, header...)
	for _, q := range qs {
		row := append([]string{q.Name, yesNo(q.Paused)}, statusCounts(q.Counts)...)
		// No policy: the tasks follow norn.DefaultRetry.
		retries := fmt.Sprintf("%d (default)", norn.DefaultRetry.MaxRetries)
		if q.Defaults.Retry != nil {
			retries = fmt.Sprint(q.Defaults.Retry.MaxRetries)
		}
		maxRuntime := "-"
		if q.Defaults.MaxRuntime > 0 {
			maxRuntime = q.Defaults.MaxRuntime.String()
		}
		row = append(row, q.Defaults.Timeout.String(), fmt.Sprint(q.Defaults.MaxAttempts), retries, maxRuntime)
		tab.row(row...)
	}
	return tab.flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func queueGetCmd(g *Globals) *cobra.Command {
	return showCommand(g, "get QUEUE", "Show one queue with its counts and defaults",
		(*client.Client).Queue, describeQueue)
}

func describeQueue(w io.Writer, q norn.QueueInfo) error {
	tab := newTable(w)
	tab.row("queue:", q.Name)
	tab.row("paused:", yesNo(q.Paused))
	for _, s := range norn.AllStatuses {
		tab.row(string(s)+":", fmt.Sprint(q.Counts[s]))
	}
	d := q.Defaults
	tab.row("timeout:", d.Timeout.String())
	tab.row("max_attempts:", fmt.Sprint(d.MaxAttempts))
	if d.MaxRuntime > 0 {
		tab.row("max_runtime:", d.MaxRuntime.String())
	} else {
		tab.row("max_runtime:", "none")
	}
	if d.Retry != nil {
		tab.row("retry:", fmt.Sprintf("%d retries, backoff %s doubling, max %s", d.Retry.MaxRetries, d.Retry.Base, d.Retry.Max))
	} else {
		tab.row("retry:", "none")
	}
	tab.row("retention:", fmt.Sprintf("completed %s, aborted %s, cancelled %s (0s = forever)",
		d.Retention.Completed, d.Retention.Aborted, d.Retention.Cancelled))
	tab.row("max_running:", limitText(q.MaxRunning))
	tab.row("key_limit:", limitText(q.KeyLimit))
	if q.FairBy != "" {
		tab.row("fair_by:", q.FairBy)
	} else {
		tab.row("fair_by:", "none (claim order)")
	}
	tab.row("rate_limit:", rateText(q))
	tab.row("key_rate_limit:", keyRateText(q.KeyRateLimit, "none"))
	if d.SequenceOnFailure == norn.SequenceContinue {
		tab.row("sequence_on_failure:", "continue (an aborted head moves its sequence on)")
	} else {
		tab.row("sequence_on_failure:", "halt (an aborted head halts its sequence)")
	}
	for _, k := range q.Keys {
		lim := "queue's"
		if k.Limit > 0 {
			lim = fmt.Sprint(k.Limit)
		}
		w := ""
		if k.Weight > 0 {
			w = fmt.Sprintf(", weight %d", k.Weight)
		}
		if !k.RateLimit.IsZero() {
			w += ", rate " + keyRateText(k.RateLimit, "")
		}
		tab.row("key "+k.Key+":", fmt.Sprintf("running %d, limit %s%s", k.Running, lim, w))
	}
	return tab.flush()
}

func rateText(q norn.QueueInfo) string {
	r := q.RateLimit
	if r.IsZero() {
		return "unlimited"
	}
	out := fmt.Sprintf("%s/s, burst %d", strconv.FormatFloat(r.PerSecond, 'g', -1, 64), r.Burst)
	if q.RateTokens != nil {
		out += fmt.Sprintf(" (%.2f tokens now)", *q.RateTokens)
	}
	return out
}

// keyRateText shows a key rate limit, none when it is zero.
func keyRateText(r norn.RateLimit, none string) string {
	if r.IsZero() {
		return none
	}
	return fmt.Sprintf("%s/s, burst %d", strconv.FormatFloat(r.PerSecond, 'g', -1, 64), r.Burst)
}

// parseRate reads --rate-limit: N/s, N/m, N/h or a bare N (per second);
// 0 and "off" remove the limit.
func parseRate(v string) (float64, error) { return parseRateFlag("--rate-limit", v) }

// parseRateFlag is parseRate for the flag named flag.
func parseRateFlag(flag, v string) (float64, error) {
	if v == "off" {
		return 0, nil
	}
	num, unit, _ := strings.Cut(v, "/")
	per := map[string]float64{"": 1, "s": 1, "m": 60, "h": 3600}[unit]
	n, err := strconv.ParseFloat(num, 64)
	if per == 0 || err != nil || n < 0 || math.IsInf(n, 0) || math.IsNaN(n) {
		return 0, usagef("%s %q: want a rate like 100/s, 30/m or 5/h (0 or off removes the limit)", flag, v)
	}
	return n / per, nil
}

func limitText(n int) string {
	if n == 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

func queuePauseCmd(g *Globals, pause bool) *cobra.Command {
	use, short := "resume QUEUE...", "Resume claiming from queues"
	if pause {
		use, short = "pause QUEUE...", "Pause claiming from queues (everything else keeps working)"
	}
	var create bool
	cmd := pauseCommand(g, "queue", pause, use, short,
		func(ctx context.Context, c *client.Client, name string, paused bool) (norn.QueueInfo, error) {
			if !create {
				if err := queueExists(ctx, c, name); err != nil {
					return norn.QueueInfo{}, err
				}
			}
			return c.UpdateQueue(ctx, name, norn.QueueUpdate{Paused: &paused})
		})
	cmd.Flags().BoolVar(&create, "create", false, "also for a queue that has no tasks and no settings yet (it is created paused)")
	return cmd
}

// queueExists refuses a queue name that has no tasks and no settings: a
// typo would otherwise create a queue nobody uses, silently.
func queueExists(ctx context.Context, c *client.Client, name string) error {
	qs, err := c.Queues(ctx)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(qs))
	for _, q := range qs {
		if q.Name == name {
			return nil
		}
		names = append(names, q.Name)
	}
	known := "there are no queues yet"
	if len(names) > 0 {
		known = "queues: " + strings.Join(names, ", ")
	}
	return usagef("queue %q has no tasks and no settings (%s); give --create to create it", name, known)
}

// queueSetFlags are the flags of queues set.
type queueSetFlags struct {
	timeout, maxRuntime, expireIn, retCompleted, retAborted, retCancelled time.Duration
	maxAttempts, maxRunning, keyLimit, burst, keyBurst                    int
	rateLimit, keyRateLimit, fairBy, sequenceOnFailure                    string
	retry                                                                 retryFlags
	keys, unsetKeys, keyWeights, keyRates                                 []string
}

func queueSetCmd(g *Globals) *cobra.Command {
	qf := &queueSetFlags{}
	cmd := &cobra.Command{
		Use:   "set QUEUE",
		Short: "Change a queue's defaults (timeout, retries, max attempts, max runtime, retention) and flow limits",
		Long: `Change the defaults a queue applies to tasks that do not set their own, how
long its terminal tasks are kept, and its flow limits. Only the flags given
change. Retention 0 keeps tasks forever. --retry 0 turns retries off (a queue
without a policy follows the default: 24 retries, 1s doubling to 1h);
--max-runtime 0 and --expire-in 0 remove theirs. A new default applies to
tasks submitted later.

Flow limits are enforced by the store at claim time, across every worker and
server node: --max-running caps the queue's running tasks, --key-limit the
running tasks of each concurrency_key, --key KEY=N gives one key its own
limit and --unset-key KEY removes it again. 0 removes a limit.

Fair claiming: --fair-by concurrency_key (or label:NAME, e.g. label:tenant)
makes claims rotate across the key's values among ready tasks of equal
priority, so one key's backlog does not hold up another key's tasks;
--key-weight KEY=W gives a key W claims for each one of a weight-1 key.
--fair-by "" turns it off. A queue fair by a label cannot have key limits.

--rate-limit caps how fast claims hand out the queue's tasks, across the
cluster (a token bucket in the store): 100/s, 30/m, 5/h, or off. --burst is how
many may go at once after a quiet spell (default: one second's worth, at
least 1).

Per-key rate limits: --key-rate-limit gives every concurrency key of the
queue its own token bucket of that rate (--key-burst: its burst), so one
key's backlog waits for its own tokens while other keys' tasks keep going;
--key-rate KEY=RATE[:BURST] gives one key its own rate instead (KEY=off
removes it, and the queue's applies again). Tasks without a key are not key
rate limited. A queue fair by a label cannot have key rate limits.

--sequence-on-failure says what a sequence's head that ends aborted does
(see 'norn sequence'): halt (the default) keeps it as the head and halts the
sequence until it is retried or deleted; continue moves on to the next
member.`,
		Example: `  norn queues set emails --timeout 1m --retry 5 --retry-base 10s --retry-max 10m
  norn queues set reports --max-runtime 15m
  norn queues set emails --retention-completed 1h --retention-aborted 0
  norn queues set payments --max-running 50 --key-limit 10 --key acme=2
  norn queues set reports --fair-by label:tenant --key-weight acme=3
  norn queues set emails --rate-limit 100/s --burst 10
  norn queues set emails --rate-limit off
  norn queues set webhooks --key-rate-limit 5/s --key-burst 10 --key-rate acme=50/s:100
  norn queues set webhooks --key-rate-limit off --key-rate acme=off
  norn queues set ledger --sequence-on-failure continue`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := outputFormat(g)
			if err != nil {
				return err
			}
			u, ke, err := qf.update(cmd.Flags())
			if err != nil {
				return err
			}
			return withClient(g, func(c *client.Client) error {
				if err := qf.complete(cmd.Context(), c, args[0], cmd.Flags(), &u, ke); err != nil {
					return err
				}
				if reflect.ValueOf(u).IsZero() {
					return usagef("nothing to change: give at least one of --timeout, --max-attempts, --max-runtime, --expire-in, --retry, --retention-*, --max-running, --key-limit, --key, --unset-key, --fair-by, --key-weight, --rate-limit, --key-rate-limit, --key-rate, --sequence-on-failure")
				}
				q, err := c.UpdateQueue(cmd.Context(), args[0], u)
				if err != nil {
					return err
				}
				return show(cmd.OutOrStdout(), format, q, describeQueue)
			})
		},
	}
	qf.add(cmd.Flags())
	return cmd
}

func (qf *queueSetFlags) add(fs *pflag.FlagSet) {
	fs.DurationVar(&qf.timeout, "timeout", 0, "default lease length")
	fs.DurationVar(&qf.maxRuntime, "max-runtime", 0, "default runtime limit of one attempt (0 = none)")
	fs.DurationVar(&qf.expireIn, "expire-in", 0, "default expiry of tasks that give none: aborted if not started this long after they may run (0 = none)")
	fs.IntVar(&qf.maxRunning, "max-running", 0, "at most this many running tasks in the queue (0 = unlimited)")
	fs.IntVar(&qf.keyLimit, "key-limit", 0, "at most this many running tasks per concurrency key (0 = unlimited)")
	fs.StringVar(&qf.rateLimit, "rate-limit", "", "claims hand out at most this many tasks: 100/s, 30/m, 5/h (off = no limit)")
	fs.IntVar(&qf.burst, "burst", 0, "with --rate-limit: how many tasks may go at once (default: one second's worth)")
	fs.StringVar(&qf.keyRateLimit, "key-rate-limit", "", "every concurrency key's own bucket: claims hand out at most this many of a key's tasks: 100/s, 30/m, 5/h (off = none)")
	fs.IntVar(&qf.keyBurst, "key-burst", 0, "with --key-rate-limit: how many of a key's tasks may go at once (default: one second's worth)")
	fs.StringArrayVar(&qf.keyRates, "key-rate", nil, "KEY=RATE[:BURST]: one key's own rate limit, e.g. acme=50/s:100 (KEY=off: the queue's; repeatable)")
	fs.StringArrayVar(&qf.keys, "key", nil, "KEY=LIMIT: one concurrency key's own running limit (repeatable)")
	fs.StringArrayVar(&qf.unsetKeys, "unset-key", nil, "remove a key's own settings (repeatable)")
	fs.StringVar(&qf.fairBy, "fair-by", "", `rotate claims across "concurrency_key" or "label:NAME" ("" = off)`)
	fs.StringArrayVar(&qf.keyWeights, "key-weight", nil, "KEY=WEIGHT: one key's share of claims under --fair-by (repeatable)")
	fs.StringVar(&qf.sequenceOnFailure, "sequence-on-failure", "", "what an aborted sequence head does: halt (the sequence waits until it is retried or deleted) or continue")
	fs.IntVar(&qf.maxAttempts, "max-attempts", 0, "default max attempts (0 = unlimited)")
	qf.retry.add(fs, "default retries after a failure (0 = none)")
	fs.DurationVar(&qf.retCompleted, "retention-completed", 0, "keep completed tasks this long (0 = forever)")
	fs.DurationVar(&qf.retAborted, "retention-aborted", 0, "keep aborted tasks this long (0 = forever)")
	fs.DurationVar(&qf.retCancelled, "retention-cancelled", 0, "keep cancelled tasks this long (0 = forever)")
}

// keyEdits are the --key, --key-weight and --key-rate values: a key's
// settings are replaced as a whole, so complete starts from its current
// ones.
type keyEdits struct {
	limits, weights map[string]int
	rates           map[string]norn.RateLimit
}

func newKeyEdits() keyEdits {
	return keyEdits{limits: map[string]int{}, weights: map[string]int{}, rates: map[string]norn.RateLimit{}}
}

func (ke keyEdits) empty() bool { return len(ke.limits)+len(ke.weights)+len(ke.rates) == 0 }

// update is the queue update the flags give without asking the server;
// bad values are usage errors naming the flag.
func (qf *queueSetFlags) update(fl *pflag.FlagSet) (norn.QueueUpdate, keyEdits, error) {
	var u norn.QueueUpdate
	ke := newKeyEdits()
	if err := qf.checkValues(fl); err != nil {
		return u, ke, err
	}
	if fl.Changed("timeout") {
		if qf.timeout <= 0 {
			return u, ke, usagef("--timeout must be positive")
		}
		u.Timeout = durPtr(qf.timeout)
	}
	var err error
	if u.MaxAttempts, err = givenCount(fl, "max-attempts", qf.maxAttempts); err != nil {
		return u, ke, err
	}
	if fl.Changed("max-runtime") {
		u.MaxRuntime = durPtr(qf.maxRuntime)
	}
	if fl.Changed("expire-in") {
		u.ExpireIn = durPtr(qf.expireIn)
	}
	if fl.Changed("max-running") {
		u.MaxRunning = &qf.maxRunning
	}
	if fl.Changed("key-limit") {
		u.KeyLimit = &qf.keyLimit
	}
	if fl.Changed("rate-limit") {
		r, err := parseRate(qf.rateLimit)
		if err != nil {
			return u, ke, err
		}
		u.RateLimit = &norn.RateLimit{PerSecond: r, Burst: qf.burst}
	} else if fl.Changed("burst") {
		return u, ke, usagef("--burst needs --rate-limit")
	}
	if fl.Changed("key-rate-limit") {
		r, err := parseRateFlag("--key-rate-limit", qf.keyRateLimit)
		if err != nil {
			return u, ke, err
		}
		u.KeyRateLimit = &norn.RateLimit{PerSecond: r, Burst: qf.keyBurst}
	} else if fl.Changed("key-burst") {
		return u, ke, usagef("--key-burst needs --key-rate-limit")
	}
	if fl.Changed("fair-by") {
		u.FairBy = &qf.fairBy
	}
	if fl.Changed("sequence-on-failure") {
		if err := norn.ValidateSequenceOnFailure("sequence_on_failure", qf.sequenceOnFailure); err != nil || qf.sequenceOnFailure == "" {
			return u, ke, usagef("--sequence-on-failure must be %s or %s", norn.SequenceHalt, norn.SequenceContinue)
		}
		u.SequenceOnFailure = &qf.sequenceOnFailure
	}
	if err := qf.keySettings(&u, ke); err != nil {
		return u, ke, err
	}
	if err := u.Validate(); err != nil {
		return u, ke, err
	}
	u.Retry, err = qf.retry.policy(fl)
	return u, ke, err
}

func durPtr(d time.Duration) *norn.Duration {
	v := norn.Duration(d)
	return &v
}

// checkValues refuses negative or too long durations and counts out of
// range, naming the flag.
func (qf *queueSetFlags) checkValues(fl *pflag.FlagSet) error {
	for _, d := range []time.Duration{qf.timeout, qf.maxRuntime, qf.expireIn, qf.retry.base, qf.retry.max, qf.retCompleted, qf.retAborted, qf.retCancelled} {
		if d < 0 {
			return usagef("durations must not be negative")
		}
	}
	if err := checkDurations(durationFlag{"timeout", qf.timeout}, durationFlag{"max-runtime", qf.maxRuntime}, durationFlag{"expire-in", qf.expireIn},
		durationFlag{"retention-completed", qf.retCompleted}, durationFlag{"retention-aborted", qf.retAborted},
		durationFlag{"retention-cancelled", qf.retCancelled}); err != nil {
		return err
	}
	for _, c := range []struct {
		name string
		n    int
	}{{"max-running", qf.maxRunning}, {"key-limit", qf.keyLimit}} {
		if err := norn.ValidateCount("--"+c.name, c.n); fl.Changed(c.name) && err != nil {
			return usagef("%v", err)
		}
	}
	return nil
}

// parseKeyRate reads one --key-rate value, KEY=RATE[:BURST]; a rate of 0
// or off (no burst) removes the key's own rate limit.
func parseKeyRate(kv string) (string, norn.RateLimit, error) {
	k, v, ok := strings.Cut(kv, "=")
	bad := usagef("--key-rate %q: want KEY=RATE[:BURST], e.g. --key-rate acme=50/s or acme=50/s:100 (acme=off removes it)", kv)
	if !ok || k == "" || v == "" {
		return "", norn.RateLimit{}, bad
	}
	rate, burst, hasBurst := strings.Cut(v, ":")
	r, err := parseRateFlag("--key-rate "+k, rate)
	if err != nil {
		return "", norn.RateLimit{}, err
	}
	rl := norn.RateLimit{PerSecond: r}
	if hasBurst {
		n, err := strconv.Atoi(burst)
		if err != nil || n < 0 || r == 0 {
			return "", norn.RateLimit{}, bad
		}
		rl.Burst = n
	}
	return k, rl, nil
}

// keySettings reads --key, --key-weight, --key-rate and --unset-key into
// u.Keys.
func (qf *queueSetFlags) keySettings(u *norn.QueueUpdate, ke keyEdits) error {
	for _, kv := range qf.keys {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			return usagef("--key %q: want KEY=LIMIT, e.g. --key acme=2", kv)
		}
		ke.limits[k] = n
	}
	for _, kv := range qf.keyWeights {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			return usagef("--key-weight %q: want KEY=WEIGHT, e.g. --key-weight acme=3", kv)
		}
		ke.weights[k] = n
	}
	for _, kv := range qf.keyRates {
		k, rl, err := parseKeyRate(kv)
		if err != nil {
			return err
		}
		ke.rates[k] = rl
	}
	set := func(k string, ks *norn.KeySettings) {
		if u.Keys == nil {
			u.Keys = map[string]*norn.KeySettings{}
		}
		u.Keys[k] = ks
	}
	edit := func(k string) *norn.KeySettings {
		if u.Keys[k] == nil {
			set(k, &norn.KeySettings{})
		}
		return u.Keys[k]
	}
	for k, n := range ke.limits {
		edit(k).Limit = n
	}
	for k, n := range ke.weights {
		edit(k).Weight = n
	}
	for k, rl := range ke.rates {
		edit(k).RateLimit = rl
	}
	for _, k := range qf.unsetKeys {
		set(k, nil)
	}
	return nil
}

// complete fills in from the queue's current settings what the flags
// change only in part: the other members of an edited key, and the
// retention of the statuses not named (retention is one value on the wire).
func (qf *queueSetFlags) complete(ctx context.Context, c *client.Client, name string, fl *pflag.FlagSet, u *norn.QueueUpdate, ke keyEdits) error {
	retention := fl.Changed("retention-completed") || fl.Changed("retention-aborted") || fl.Changed("retention-cancelled")
	if ke.empty() && !retention {
		return nil
	}
	cur, err := c.Queue(ctx, name)
	if err != nil && !errors.Is(err, norn.ErrNotFound) {
		return err
	}
	for _, ki := range cur.Keys {
		ks := u.Keys[ki.Key]
		if ks == nil {
			continue
		}
		if _, ok := ke.limits[ki.Key]; !ok {
			ks.Limit = ki.Limit
		}
		if _, ok := ke.weights[ki.Key]; !ok {
			ks.Weight = ki.Weight
		}
		if _, ok := ke.rates[ki.Key]; !ok {
			ks.RateLimit = ki.RateLimit
		}
	}
	if retention {
		r := cur.Defaults.Retention
		if fl.Changed("retention-completed") {
			r.Completed = norn.Duration(qf.retCompleted)
		}
		if fl.Changed("retention-aborted") {
			r.Aborted = norn.Duration(qf.retAborted)
		}
		if fl.Changed("retention-cancelled") {
			r.Cancelled = norn.Duration(qf.retCancelled)
		}
		u.Retention = &r
	}
	return nil
}
