package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		cmd := &cobra.Command{
			Use:   "get ID...",
			Short: "Show tasks by id (details, or -o json)",
			Long: `Show one or more tasks with their spec, result, errors and history.
Several ids are fetched in one request. Ids that do not exist are reported on
stderr and make the exit code 1; the tasks that exist are still printed.

A task with dependencies shows the outcome recorded for each one that ended
(completed, aborted, cancelled or deleted, with its result or error), and
any task shows how many tasks depend on it. History entries TaskAwait mark
the task waiting for children it submitted while running; the children are
appended to its depends_on. TaskReplace marks a submit with on_duplicate
replace that gave the task, before it started, a new spec, labels, priority
and run time.`,
			Example: `  norn get 0193b2f4-7c1e-7cc3-9a57-5d2b0c1f2e3a
  norn get job-1 job-2 -o json`,
			Args: cobra.MinimumNArgs(1),
			RunE: clientRun(g, func(cmd *cobra.Command, args []string, format string, c *client.Client) error {
				var tasks []*norn.Task
				var missing []string
				var err error
				if len(args) == 1 {
					t, err := c.Get(cmd.Context(), args[0])
					if err != nil {
						return err
					}
					tasks = []*norn.Task{t}
				} else {
					tasks, missing, err = c.GetMany(cmd.Context(), args)
					if err != nil {
						return err
					}
				}
				w := cmd.OutOrStdout()
				switch {
				case format == outJSON && len(args) == 1:
					if err := writeJSON(w, tasks[0]); err != nil {
						return err
					}
				case format != outTable:
					if err := emitAll(w, format, tasks); err != nil {
						return err
					}
				default:
					now := time.Now()
					for i, t := range tasks {
						deps, err := dependentsOf(cmd.Context(), c, t.ID)
						if err != nil {
							return err
						}
						if i > 0 {
							fmt.Fprintln(w)
						}
						describeTask(w, t, deps, now)
					}
				}
				if len(missing) > 0 {
					return norn.Errorf(norn.CodeNotFound, "not found: %s", strings.Join(missing, ", "))
				}
				return nil
			}),
		}
		return clientCommand(cmd)
	})
}

// maxDependentsShown bounds the dependent ids 'norn get' lists; the
// count is always exact.
const maxDependentsShown = 10

// dependents are the tasks that list a task among their dependencies.
type dependents struct {
	count int64
	ids   []string // the first maxDependentsShown
}

// dependentsOf asks the server for the tasks depending on id.
func dependentsOf(ctx context.Context, c *client.Client, id string) (dependents, error) {
	f := norn.Filter{DependsOn: id}
	p, err := c.List(ctx, norn.Query{Filter: f, Limit: maxDependentsShown, Summary: true})
	if err != nil {
		return dependents{}, err
	}
	d := dependents{count: int64(len(p.Tasks))}
	for _, t := range p.Tasks {
		d.ids = append(d.ids, t.ID)
	}
	if p.NextCursor != "" {
		if d.count, err = c.Count(ctx, f); err != nil {
			return dependents{}, err
		}
	}
	return d, nil
}

// describeTask prints a task as aligned "key: value" lines for people.
func describeTask(w io.Writer, t *norn.Task, deps dependents, now time.Time) {
	tab := newTable(w)
	kv := func(k, v string) { tab.row(k+":", v) }
	kv("id", t.ID)
	kv("queue", t.Queue)
	kv("status", string(t.Status))
	kv("priority", fmt.Sprint(t.Priority))
	kv("progress", fmt.Sprintf("%.0f%%", t.Progress*100))
	kv("labels", formatLabels(t.Labels))
	kv("created", stamp(t.Created, now))
	kv("updated", stamp(t.Updated, now))
	kv("run_at", stamp(t.RunAt, now))
	if t.SequenceKey != "" {
		kv("sequence_key", fmt.Sprintf("%s (norn sequence %s %s)", t.SequenceKey, shellWord(t.Queue), shellWord(t.SequenceKey)))
	}
	if len(t.DependsOn) > 0 {
		kv("depends_on", strings.Join(t.DependsOn, ", "))
		policy := t.OnDependencyFailure
		if policy == "" {
			policy = norn.DependencyAbort
		}
		kv("on_dependency_failure", policy)
		kv("dependency_results", fmt.Sprintf("%d of %d ended", len(t.DependencyResults), len(t.DependsOn)))
		for _, r := range t.DependencyResults {
			kv("  "+r.ID, dependencyOutcome(r))
		}
	}
	switch {
	case deps.count == 0:
		kv("dependents", "none")
	case int64(len(deps.ids)) < deps.count:
		kv("dependents", fmt.Sprintf("%d (%s, …; norn list --depends-on %s)", deps.count, strings.Join(deps.ids, ", "), t.ID))
	default:
		kv("dependents", fmt.Sprintf("%d (%s)", deps.count, strings.Join(deps.ids, ", ")))
	}
	kv("owner", dash(t.Owner))
	if !t.Deadline.IsZero() {
		kv("deadline", stamp(t.Deadline, now))
	}
	kv("lease", fmt.Sprint(t.Lease))
	kv("attempts", attempts(t))
	if t.Retry != nil {
		kv("retry", fmt.Sprintf("%d retries, backoff %s doubling, max %s", t.Retry.MaxRetries, t.Retry.Base, t.Retry.Max))
	}
	kv("timeout", t.Timeout.String())
	if t.MaxRuntime > 0 {
		kv("max_runtime", t.MaxRuntime.String())
	}
	if !t.Started.IsZero() {
		kv("started", stamp(t.Started, now))
	}
	if t.Batch != "" {
		kv("batch", t.Batch)
	}
	if t.UniqueKey != "" {
		kv("unique_key", t.UniqueKey)
	}
	if !t.ExpiresAt.IsZero() {
		kv("expires_at", stamp(t.ExpiresAt, now))
	}
	kv("version", fmt.Sprint(t.Version))
	kv("spec", compactJSON(t.Spec))
	if len(t.Result) > 0 {
		kv("result", compactJSON(t.Result))
	}
	for i, e := range t.Errors {
		kv(fmt.Sprintf("error[%d]", i), errorText(e))
	}
	switch {
	case t.HistoryDropped > 0:
		kv("history", fmt.Sprintf("(%d older entries dropped)", t.HistoryDropped))
	case len(t.History) > 0:
		kv("history", "")
	}
	for _, h := range t.History {
		line := string(h.Type)
		if h.Worker != "" {
			line += " by " + h.Worker
		}
		if h.Lease > 0 {
			line += fmt.Sprintf(" lease %d", h.Lease)
		}
		if h.Error != nil {
			line += ": " + errorText(*h.Error)
		}
		switch h.Type {
		case norn.TaskAwait:
			line += " (waits for the children it submitted)"
		case norn.TaskReplace:
			line += " (a submit with on_duplicate replace gave it a new spec, labels, priority and run time)"
		}
		kv("  "+h.Time.UTC().Format(time.RFC3339), line)
	}
	tab.flush()
}

func stamp(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano) + " (" + ago(t, now) + ")"
}

// dependencyOutcome is one recorded dependency result on a line: its
// status and a short result or error.
func dependencyOutcome(r norn.DependencyResult) string {
	line := r.Status
	if len(r.Result) > 0 {
		line += " " + shorten(compactJSON(r.Result), 80)
	}
	if r.Error != nil {
		line += ": " + shorten(errorText(*r.Error), 80)
	}
	return line
}

// shorten cuts s to n runes, marking the cut.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

func errorText(e norn.ErrorInfo) string {
	if e.Description == "" {
		return e.Code
	}
	return e.Code + ": " + e.Description
}

// compactJSON renders raw JSON on one line, truncated for tables.
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return "-"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	s := b.String()
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
