package cli

import (
	"fmt"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		var queues []string
		var task string
		var count int
		cmd := &cobra.Command{
			Use:   "watch",
			Short: "Follow task state changes as they happen (server-sent events)",
			Long: `Print one line per task state change until interrupted (Ctrl-C), or until
--count events were printed. -o json / -o ndjson print each event as a JSON
line. A "Lagged" event means the server dropped events because this watcher
fell behind; re-read the state you care about.`,
			Example: `  norn watch -q emails
  norn watch --task job-1 --count 1 -o json`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				format, err := outputFormat(g)
				if err != nil {
					return err
				}
				if count < 0 {
					return usagef("--count must not be negative")
				}
				return withClient(g, func(c *client.Client) error {
					ctx := cmd.Context()
					s, err := c.Subscribe(ctx, norn.EventFilter{Queues: queues, TaskID: task})
					if err != nil {
						return err
					}
					defer s.Close()
					w := cmd.OutOrStdout()
					n := 0
					for s.Next() {
						ev := s.Item()
						if format == outTable {
							fmt.Fprintln(w, eventLine(ev))
						} else if err := writeNDJSONLine(w, ev); err != nil {
							return err
						}
						n++
						if count > 0 && n >= count {
							return nil
						}
					}
					if ctx.Err() != nil {
						// Interrupted by the user: a normal way to stop watching.
						return nil
					}
					return s.Err()
				})
			},
		}
		fs := cmd.Flags()
		fs.StringSliceVarP(&queues, "queue", "q", nil, "only events of these queues")
		fs.StringVar(&task, "task", "", "only events of this task")
		fs.IntVarP(&count, "count", "c", 0, "exit after this many events (0 = follow forever)")
		return clientCommand(cmd)
	})
}

// eventLine formats an event for people: time, kind, queue, task, status.
func eventLine(ev norn.Event) string {
	if ev.Kind == norn.EventLagged {
		return ev.Time.UTC().Format(time.RFC3339Nano) + " Lagged (events were dropped; re-read state)"
	}
	return fmt.Sprintf("%s %-14s %s %s %s v%d", ev.Time.UTC().Format(time.RFC3339Nano), ev.Kind,
		dash(ev.Queue), dash(ev.TaskID), dash(string(ev.Status)), ev.Version)
}
