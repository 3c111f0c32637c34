package cli

import (
	"bytes"
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
stderr and make the exit code 1; the tasks that exist are still printed.`,
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
						if i > 0 {
							fmt.Fprintln(w)
						}
						describeTask(w, t, now)
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

// describeTask prints a task as aligned "key: value" lines for people.
func describeTask(w io.Writer, t *norn.Task, now time.Time) {
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
	if len(t.DependsOn) > 0 {
		kv("depends_on", strings.Join(t.DependsOn, ", "))
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
