package cli

import (
	"fmt"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

// retryOutput is the JSON form of `norn retry`.
type retryOutput struct {
	Retried int64 `json:"retried"`
	// DryRun is set when nothing was retried and Retried is how many
	// aborted or cancelled tasks the filters match.
	DryRun bool `json:"dry_run,omitempty"`
}

func init() {
	register(func(g *Globals) *cobra.Command {
		var (
			dryRun, withDeps, yes bool
			delay                 time.Duration
			runAt                 string
			ff                    *filterFlags
		)
		cmd := &cobra.Command{
			Use:   "retry [ID...]",
			Short: "Run again aborted or cancelled tasks, by id or every one matching filters",
			Long: `Retry (redrive) the given tasks, or, with filter flags and no ids, every
aborted or cancelled task matching the filters (other matches are skipped).
A retried task is ready again (or scheduled with --delay/--run-at, or blocked
while its dependencies are not completed) with its attempts back to 0; its
errors and history are kept and a TaskRedrive entry is added.
--with-dependents also brings back the tasks that were aborted because this
one failed. A filter is required so nobody retries a whole store by accident;
--dry-run prints how many tasks the filters would retry, so check the count
first. A completed or pending task cannot be retried. Every id is tried; the
exit code is 1 if any failed.`,
			Example: `  norn retry job-1 job-2
  norn retry job-1 --with-dependents --delay 10m
  norn retry -q emails -s failed --dry-run
  norn retry -q emails -s failed --yes`,
			RunE: func(cmd *cobra.Command, args []string) error {
				format, err := outputFormat(g)
				if err != nil {
					return err
				}
				now := time.Now()
				f, err := ff.filter(now)
				if err != nil {
					return err
				}
				var o norn.RetryOptions
				o.WithDependents = withDeps
				switch {
				case delay < 0:
					return usagef("--delay must not be negative")
				case delay > 0 && runAt != "":
					return usagef("give --delay or --run-at, not both")
				case delay > 0:
					if err := checkDurations(durationFlag{"delay", delay}); err != nil {
						return err
					}
					o.RunAt = now.Add(delay)
				case runAt != "":
					if o.RunAt, err = time.Parse(time.RFC3339, runAt); err != nil {
						return usagef("--run-at: %v", err)
					}
					if err := checkTime("run-at", o.RunAt); err != nil {
						return err
					}
				}
				if err := idsOrFilter("retry", args, &f, dryRun); err != nil {
					return err
				}
				if len(args) == 0 && (withDeps || !o.RunAt.IsZero()) {
					return usagef("--with-dependents, --delay and --run-at work with task ids only")
				}
				return withClient(g, func(c *client.Client) error {
					if len(args) > 0 {
						return perTask(cmd, format, "retry", args, func(id string) (*norn.Task, error) {
							return c.Retry(cmd.Context(), id, o)
						})
					}
					return bulkByFilter(cmd, format, "retry", "retried", dryRun, yes,
						func() (int64, error) {
							if rf, ok := norn.RetryFilter(f); ok {
								return c.Count(cmd.Context(), rf)
							}
							return 0, nil
						},
						func() (int64, error) { return c.RetryMatching(cmd.Context(), f) },
						func(n int64, dry bool) any { return retryOutput{Retried: n, DryRun: dry} })
				})
			},
		}
		ff = addFilterFlags(cmd.Flags())
		cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only count the aborted and cancelled tasks the filters match")
		cmd.Flags().BoolVarP(&yes, "yes", "y", false, "retry by filter without asking (required without a terminal)")
		cmd.Flags().BoolVar(&withDeps, "with-dependents", false, "also bring back the tasks aborted because these failed")
		cmd.Flags().DurationVar(&delay, "delay", 0, "run no earlier than this long from now (e.g. 30s, 5m)")
		cmd.Flags().StringVar(&runAt, "run-at", "", "run no earlier than this time (RFC 3339)")
		return clientCommand(cmd)
	})
}

// idsOrFilterArgs starts a command that acts on task ids or, with none, on
// every task matching the filter flags: the -o format, the filter, and
// idsOrFilter's checks.
func (ff *filterFlags) idsOrFilterArgs(g *Globals, verb string, args []string, dryRun bool) (string, norn.Filter, error) {
	format, err := outputFormat(g)
	if err != nil {
		return "", norn.Filter{}, err
	}
	f, err := ff.filter(time.Now())
	if err != nil {
		return "", f, err
	}
	return format, f, idsOrFilter(verb, args, &f, dryRun)
}

// idsOrFilter checks the arguments of a command that acts on task ids or,
// with none, on every task matching a filter that must not be empty.
func idsOrFilter(verb string, args []string, f *norn.Filter, dryRun bool) error {
	switch {
	case len(args) > 0 && !f.Empty():
		return usagef("give task ids or filters, not both")
	case len(args) == 0 && f.Empty():
		return usagef("%s needs task ids or at least one filter (--queue, --status, --label, ...)", verb)
	case len(args) > 0 && dryRun:
		return usagef("--dry-run works with filters only")
	}
	return nil
}

// perTask calls do for each id and prints the tasks it returns (table: one
// line each; JSON: an array; NDJSON: one task a line). Every id is tried;
// the error says how many failed.
func perTask(cmd *cobra.Command, format, verb string, ids []string, do func(id string) (*norn.Task, error)) error {
	w := cmd.OutOrStdout()
	var done []*norn.Task
	failed := 0
	for _, id := range ids {
		t, err := do(id)
		if err != nil {
			failed++
			fmt.Fprintf(cmd.ErrOrStderr(), "norn: %s %s: %v\n", verb, id, err)
			continue
		}
		done = append(done, t)
		if format == outTable {
			line := t.ID + " " + pastTense(verb)
			if verb == "retry" {
				line += " (" + string(t.Status) + ")" // ready, scheduled or blocked
			}
			fmt.Fprintln(w, line)
		}
	}
	if format != outTable {
		if done == nil {
			done = []*norn.Task{}
		}
		if err := emitAll(w, format, done); err != nil {
			return err
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d tasks could not be %s", failed, len(ids), pastTense(verb))
	}
	return nil
}

func pastTense(verb string) string {
	switch verb {
	case "retry":
		return "retried"
	case "cancel":
		return "cancelled"
	}
	return verb + "ed"
}
