package cli

import (
	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

// cancelOutput is the JSON form of `norn cancel` by filter.
type cancelOutput struct {
	Cancelled int64 `json:"cancelled"`
	// DryRun is set when nothing was cancelled and Cancelled is how many
	// pending tasks the filters match.
	DryRun bool `json:"dry_run,omitempty"`
}

func init() {
	register(func(g *Globals) *cobra.Command {
		var (
			dryRun, yes bool
			ff          *filterFlags
		)
		cmd := &cobra.Command{
			Use:   "cancel [ID...]",
			Short: "Cancel tasks (scheduled, blocked, ready or running), by id or every one matching filters",
			Long: `Cancel each task, or, with filter flags and no ids, every pending task
(scheduled, blocked, ready or running) matching the filters; ended matches
are skipped. A running task's worker learns of it on its next heartbeat; a
cancelled task's dependents abort. Cancelling a cancelled task is not an
error; a completed or aborted task cannot be cancelled. A filter is required
so nobody cancels a whole store by accident; --dry-run prints how many tasks
the filters would cancel. Every id is tried; the exit code is 1 if any failed.`,
			Example: `  norn cancel job-1 job-2
  norn cancel -q emails -l campaign=spring --dry-run
  norn cancel -q emails -l campaign=spring --yes`,
			RunE: func(cmd *cobra.Command, args []string) error {
				format, f, err := ff.idsOrFilterArgs(g, "cancel", args, dryRun)
				if err != nil {
					return err
				}
				return withClient(g, func(c *client.Client) error {
					if len(args) > 0 {
						return perTask(cmd, format, "cancel", args, func(id string) (*norn.Task, error) {
							return c.Cancel(cmd.Context(), id)
						})
					}
					return bulkByFilter(cmd, format, "cancel", "cancelled", dryRun, yes,
						func() (int64, error) {
							if cf, ok := norn.CancelFilter(f); ok {
								return c.Count(cmd.Context(), cf)
							}
							return 0, nil
						},
						func() (int64, error) { return c.CancelMatching(cmd.Context(), f) },
						func(n int64, dry bool) any { return cancelOutput{Cancelled: n, DryRun: dry} })
				})
			},
		}
		ff = addFilterFlags(cmd.Flags())
		cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only count the pending tasks the filters match")
		cmd.Flags().BoolVarP(&yes, "yes", "y", false, "cancel by filter without asking (required without a terminal)")
		return clientCommand(cmd)
	})
}
