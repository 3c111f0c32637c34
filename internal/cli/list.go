package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// filterFlags are the task filters shared by list, count, delete, cancel
// and retry.
type filterFlags struct {
	queues        []string
	status        []string
	labels        []string
	owner         string
	idContains    string
	dependsOn     string
	uniqueKey     string
	batch         string
	createdAfter  string
	createdBefore string
	updatedAfter  string
	updatedBefore string
}

func addFilterFlags(fs *pflag.FlagSet) *filterFlags {
	f := &filterFlags{}
	fs.StringSliceVarP(&f.queues, "queue", "q", nil, "only these queues (repeatable or comma-separated)")
	fs.StringSliceVarP(&f.status, "status", "s", nil, "only these statuses (repeatable or comma-separated: scheduled, blocked, ready, running, completed, aborted, cancelled, or pending, succeeded, failed, terminal)")
	fs.StringArrayVarP(&f.labels, "label", "l", nil, "only tasks with label key=value (repeatable; all must match)")
	fs.StringVar(&f.owner, "owner", "", "only tasks owned (now or last) by this worker id")
	fs.StringVar(&f.idContains, "id-contains", "", "only ids containing this text")
	fs.StringVar(&f.dependsOn, "depends-on", "", "only tasks that depend on this task id")
	fs.StringVar(&f.uniqueKey, "unique-key", "", "only tasks submitted with this unique key")
	fs.StringVar(&f.batch, "batch", "", "only the members of this batch")
	fs.StringVar(&f.createdAfter, "created-after", "", "created after this time (RFC 3339, or a duration meaning that long ago: 1h)")
	fs.StringVar(&f.createdBefore, "created-before", "", "created before this time (RFC 3339 or duration ago)")
	fs.StringVar(&f.updatedAfter, "updated-after", "", "updated after this time (RFC 3339 or duration ago)")
	fs.StringVar(&f.updatedBefore, "updated-before", "", "updated before this time (RFC 3339 or duration ago)")
	return f
}

// filter builds the norn.Filter; bad values are usage errors naming the flag.
func (f *filterFlags) filter(now time.Time) (norn.Filter, error) {
	out := norn.Filter{Owner: f.owner, IDContains: f.idContains, DependsOn: f.dependsOn, UniqueKey: f.uniqueKey, Batch: f.batch}
	if f.batch != "" {
		if err := norn.ValidateBatchID("batch", f.batch); err != nil {
			return out, usagef("--batch: %v", messageOf(err))
		}
	}
	for _, q := range f.queues {
		if q = strings.TrimSpace(q); q != "" {
			out.Queues = append(out.Queues, q)
		}
	}
	st, err := norn.ParseStatuses(strings.Join(f.status, ","))
	if err != nil {
		return out, usagef("--status: %v", messageOf(err))
	}
	out.Statuses = st
	if len(f.labels) > 0 {
		l, err := parseLabels(f.labels)
		if err != nil {
			return out, usagef("--label: %v", err)
		}
		out.Labels = l
	}
	for _, tf := range []struct {
		flag, val string
		dst       *time.Time
	}{
		{"created-after", f.createdAfter, &out.CreatedAfter},
		{"created-before", f.createdBefore, &out.CreatedBefore},
		{"updated-after", f.updatedAfter, &out.UpdatedAfter},
		{"updated-before", f.updatedBefore, &out.UpdatedBefore},
	} {
		if tf.val == "" {
			continue
		}
		t, err := parseTimeOrAgo(tf.val, now)
		if err != nil {
			return out, usagef("--%s: %v", tf.flag, err)
		}
		if err := checkTime(tf.flag, t); err != nil {
			return out, err
		}
		*tf.dst = t
	}
	return out, nil
}

// messageOf returns the message of a *norn.Error without its field prefix.
func messageOf(err error) string {
	if ne, ok := err.(*norn.Error); ok {
		return ne.Message
	}
	return err.Error()
}

// parseTimeOrAgo accepts RFC 3339 ("2030-01-02T03:04:05Z") or a Go duration
// meaning that long before now ("90m").
func parseTimeOrAgo(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration like 1h", s)
}

func init() {
	register(func(g *Globals) *cobra.Command {
		var limit int
		var order string
		var summary bool
		var ff *filterFlags
		cmd := &cobra.Command{
			Use:   "list",
			Short: "List tasks matching filters (table, -o json or -o ndjson)",
			Long: `List tasks matching the filters, oldest first by default.

The table shows --limit tasks (default 100; 0 = all). -o json prints a JSON
array and -o ndjson one task per line; both stream, so --limit 0 lists any
number of tasks in constant memory.`,
			Example: `  norn list -q emails -s pending
  norn list -s failed --label tenant=acme -o json
  norn list --limit 0 -o ndjson > all.ndjson`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				return runList(cmd, g, ff, limit, order, summary)
			},
		}
		fs := cmd.Flags()
		ff = addFilterFlags(fs)
		fs.IntVarP(&limit, "limit", "n", 100, "at most this many tasks (0 = all)")
		fs.StringVar(&order, "order", "", "order: id (oldest first, default), newest or priority")
		fs.BoolVar(&summary, "summary", false, "omit spec, result, errors and history (always on for tables)")
		return clientCommand(cmd)
	})
}

func parseOrder(s string) (norn.Order, error) {
	switch strings.ToLower(s) {
	case "", "id", "oldest":
		return norn.OrderID, nil
	case "newest":
		return norn.OrderNewest, nil
	case "priority":
		return norn.OrderPriority, nil
	}
	return "", usagef("--order: unknown order %q (want id, newest or priority)", s)
}

func runList(cmd *cobra.Command, g *Globals, ff *filterFlags, limit int, order string, summary bool) error {
	format, err := outputFormat(g)
	if err != nil {
		return err
	}
	if limit < 0 {
		return usagef("--limit must not be negative")
	}
	now := time.Now()
	f, err := ff.filter(now)
	if err != nil {
		return err
	}
	o, err := parseOrder(order)
	if err != nil {
		return err
	}
	return withClient(g, func(c *client.Client) error {
		q := norn.Query{Filter: f, Order: o, Summary: summary || format == outTable}
		if limit > 0 {
			// One extra tells the table whether there is more to show.
			q.Limit = limit + 1
		}
		it, err := c.Stream(cmd.Context(), q)
		if err != nil {
			return err
		}
		defer it.Close()
		w := cmd.OutOrStdout()
		n, more := 0, false
		var tab *table
		if format == outTable {
			tab = newTable(w, "ID", "QUEUE", "STATUS", "PRI", "PROGRESS", "ATTEMPTS", "OWNER", "CREATED", "UPDATED")
		}
		if format == outJSON {
			io.WriteString(w, "[")
		}
		for it.Next() {
			t := it.Item()
			if limit > 0 && n == limit {
				more = true
				break
			}
			switch format {
			case outTable:
				tab.row(t.ID, t.Queue, string(t.Status), fmt.Sprint(t.Priority), fmt.Sprintf("%.0f%%", t.Progress*100),
					attempts(t), dash(t.Owner), ago(t.Created, now), ago(t.Updated, now))
			case outJSON:
				if n > 0 {
					io.WriteString(w, ",")
				}
				io.WriteString(w, "\n")
				b, err := json.Marshal(t)
				if err != nil {
					return err
				}
				w.Write(b)
			case outNDJSON:
				if err := writeNDJSONLine(w, t); err != nil {
					return err
				}
			}
			n++
		}
		if err := it.Err(); err != nil {
			if tab != nil {
				tab.flush()
			}
			return err
		}
		switch format {
		case outTable:
			if err := tab.flush(); err != nil {
				return err
			}
			if more {
				fmt.Fprintf(cmd.ErrOrStderr(), "(first %d tasks shown; use --limit 0 for all)\n", limit)
			} else if n == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "(no tasks)")
			}
		case outJSON:
			if n > 0 {
				io.WriteString(w, "\n")
			}
			io.WriteString(w, "]\n")
		}
		return nil
	})
}

func attempts(t *norn.Task) string {
	if t.MaxAttempts > 0 {
		return fmt.Sprintf("%d/%d", t.Attempts, t.MaxAttempts)
	}
	return fmt.Sprint(t.Attempts)
}
