package cli

import (
	"context"

	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		cmd := &cobra.Command{
			Use:   "schedule",
			Short: "Periodic schedules: a task on every tick of a cron expression",
			Long: `A schedule submits a task to its queue on every tick of a cron expression
(5 fields, 6 with seconds, or @hourly, @daily, @every 30s...) read in a time
zone (default UTC). Each tick yields exactly one task, whose id is derived
from the schedule's name and the tick, and which carries the label
norn.schedule=NAME. Writing schedules needs the admin role; reading them the
client role.`,
			Example: `  norn schedule set nightly-report --cron "0 3 * * *" --timezone Europe/Berlin \
      --queue reports --spec '{"kind":"daily"}'
  norn schedule list
  norn schedule pause nightly-report
  norn schedule trigger nightly-report
  norn list --label norn.schedule=nightly-report`,
			Args: cobra.NoArgs,
			RunE: clientRun(g, listSchedules),
		}
		list := &cobra.Command{
			Use:   "list",
			Short: "List schedules with their next and last fire",
			Args:  cobra.NoArgs,
			RunE:  clientRun(g, listSchedules),
		}
		cmd.AddCommand(
			clientCommand(list),
			clientCommand(scheduleGetCmd(g)),
			clientCommand(scheduleSetCmd(g)),
			clientCommand(schedulePauseCmd(g, true)),
			clientCommand(schedulePauseCmd(g, false)),
			clientCommand(scheduleTriggerCmd(g)),
			clientCommand(scheduleDeleteCmd(g)),
		)
		return clientCommand(cmd)
	})
}

func listSchedules(cmd *cobra.Command, _ []string, format string, c *client.Client) error {
	all, err := c.ListSchedules(cmd.Context())
	if err != nil {
		return err
	}
	return printSchedules(cmd.OutOrStdout(), format, all)
}

func printSchedules(w io.Writer, format string, all []*norn.Schedule) error {
	if format != outTable {
		return emitAll(w, format, all)
	}
	tab := newTable(w, "SCHEDULE", "QUEUE", "CRON", "TIMEZONE", "PAUSED", "NEXT_FIRE", "LAST_FIRE", "LAST_TASK")
	for _, s := range all {
		tab.row(s.Name, s.Queue, s.Cron, orUTC(s.Timezone), yesNo(s.Paused), fmtTime(s.NextFire), fmtTime(s.LastFire), orDash(s.LastTask))
	}
	return tab.flush()
}

func orUTC(tz string) string {
	if tz == "" {
		return "UTC"
	}
	return tz
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func describeSchedule(w io.Writer, s *norn.Schedule) error {
	tab := newTable(w)
	tab.row("schedule:", s.Name)
	tab.row("queue:", s.Queue)
	tab.row("cron:", s.Cron)
	tab.row("timezone:", orUTC(s.Timezone))
	tab.row("paused:", yesNo(s.Paused))
	tab.row("overlap:", string(s.Overlap))
	tab.row("catch_up:", string(s.CatchUp))
	tab.row("next_fire:", fmtTime(s.NextFire))
	tab.row("last_fire:", fmtTime(s.LastFire))
	tab.row("last_task:", orDash(s.LastTask))
	tab.row("priority:", fmt.Sprint(s.Priority))
	if len(s.Spec) > 0 {
		tab.row("spec:", string(s.Spec))
	}
	for k, v := range s.Labels {
		tab.row("label:", k+"="+v)
	}
	return tab.flush()
}

func scheduleGetCmd(g *Globals) *cobra.Command {
	return showCommand(g, "get NAME", "Show one schedule", (*client.Client).GetSchedule, describeSchedule)
}

func scheduleSetCmd(g *Globals) *cobra.Command {
	var (
		s                   norn.Schedule
		spec                string
		labels              []string
		timeout, maxRuntime time.Duration
		maxAttempts         int
		retry               retryFlags
		overlap, catchUp    string
	)
	cmd := &cobra.Command{
		Use:   "set NAME --cron EXPR --queue QUEUE [flags]",
		Short: "Create or replace a schedule (idempotent)",
		Long: `Create a schedule, or replace the one of that name with exactly what the
flags say (flags not given take their defaults, as on a first create).
Replacing a schedule with the same cron and time zone keeps its next fire,
so no tick is skipped or repeated.`,
		Example: `  norn schedule set cleanup --cron "*/15 * * * *" --queue maintenance
  norn schedule set report --cron "0 9 * * MON-FRI" --timezone America/New_York \
      --queue reports --spec '{"to":"team@example.com"}' --overlap skip --catch-up none`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := outputFormat(g)
			if err != nil {
				return err
			}
			fl := cmd.Flags()
			s.Name = args[0]
			if spec != "" {
				if !json.Valid([]byte(spec)) {
					return usagef("--spec is not valid JSON")
				}
				s.Spec = json.RawMessage(spec)
			}
			if s.Labels, err = parseLabels(labels); err != nil {
				return err
			}
			for name, d := range map[string]time.Duration{"timeout": timeout, "max-runtime": maxRuntime, "retry-base": retry.base, "retry-max": retry.max} {
				if d < 0 {
					return usagef("--%s must not be negative", name)
				}
			}
			s.Timeout, s.MaxRuntime = norn.Duration(timeout), norn.Duration(maxRuntime)
			if s.MaxAttempts, err = givenCount(fl, "max-attempts", maxAttempts); err != nil {
				return err
			}
			if s.Retry, err = retry.policy(fl); err != nil {
				return err
			}
			s.Overlap, s.CatchUp = norn.Overlap(overlap), norn.CatchUp(catchUp)
			if _, err := s.Validate(); err != nil {
				return usagef("%v", flagNamed(err))
			}
			return withClient(g, func(c *client.Client) error {
				out, err := c.PutSchedule(cmd.Context(), s)
				if err != nil {
					return err
				}
				return show(cmd.OutOrStdout(), format, out, describeSchedule)
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&s.Cron, "cron", "", `cron expression: 5 fields, 6 with seconds, or @hourly, @daily, @every 30s... (required)`)
	fs.StringVarP(&s.Queue, "queue", "q", "", "queue the tasks go to (required)")
	fs.StringVar(&s.Timezone, "timezone", "", "IANA time zone the expression is read in (default UTC)")
	fs.StringVar(&spec, "spec", "", "JSON spec of every task")
	fs.Uint32Var(&s.Priority, "priority", 0, "priority of every task")
	fs.StringArrayVarP(&labels, "label", "l", nil, "label key=value of every task (repeatable)")
	fs.DurationVar(&timeout, "timeout", 0, "lease length of every task (0 = queue default)")
	fs.DurationVar(&maxRuntime, "max-runtime", 0, "runtime limit of every task (0 = queue default)")
	fs.IntVar(&maxAttempts, "max-attempts", 0, "max attempts of every task (default: the queue's)")
	retry.add(fs, "retries after a failure (default: the queue's policy)")
	fs.StringVar(&overlap, "overlap", "allow", "while the previous tick's task is not finished: allow (submit anyway) or skip (skip the tick)")
	fs.StringVar(&catchUp, "catch-up", "one", "missed ticks after downtime: one (fire once), all (each, at most 100) or none")
	fs.BoolVar(&s.Paused, "paused", false, "create the schedule paused")
	return cmd
}

// flagNamed rewrites a validation error's field as the flag that sets it.
func flagNamed(err error) error {
	e, ok := err.(*norn.Error)
	if !ok || e.Field == "" {
		return err
	}
	flags := map[string]string{"name": "NAME", "catch_up": "--catch-up", "max_runtime": "--max-runtime", "max_attempts": "--max-attempts"}
	f, ok := flags[e.Field]
	if !ok {
		f = "--" + e.Field
	}
	return fmt.Errorf("%s: %s", f, e.Message)
}

func schedulePauseCmd(g *Globals, pause bool) *cobra.Command {
	use, short := "resume NAME...", "Resume schedules (missed ticks follow their catch-up policy)"
	if pause {
		use, short = "pause NAME...", "Pause schedules (no task is submitted until resumed)"
	}
	return pauseCommand(g, "schedule", pause, use, short,
		func(ctx context.Context, c *client.Client, name string, paused bool) (*norn.Schedule, error) {
			return c.UpdateSchedule(ctx, name, norn.ScheduleUpdate{Paused: &paused})
		})
}

// scheduleTriggerCmd prints the submitted task's id (the table format) or
// the task.
func scheduleTriggerCmd(g *Globals) *cobra.Command {
	return showCommand(g, "trigger NAME", "Submit one task of the schedule now, outside its cadence",
		func(c *client.Client, ctx context.Context, name string) (*norn.Task, error) {
			sub, err := c.TriggerSchedule(ctx, name)
			return sub.Task, err
		},
		func(w io.Writer, t *norn.Task) error {
			_, err := fmt.Fprintln(w, t.ID)
			return err
		})
}

func scheduleDeleteCmd(g *Globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME...",
		Short: "Delete schedules (the tasks they submitted stay)",
		Args:  cobra.MinimumNArgs(1),
		RunE: clientRun(g, func(cmd *cobra.Command, args []string, _ string, c *client.Client) error {
			for _, name := range args {
				if err := c.DeleteSchedule(cmd.Context(), name); err != nil {
					return fmt.Errorf("schedule %s: %w", name, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s deleted\n", name)
			}
			return nil
		}),
	}
}
