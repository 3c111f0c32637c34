package cli

import (
	"fmt"

	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

// deleteOutput is the JSON form of `norn delete`.
type deleteOutput struct {
	Deleted int64 `json:"deleted"`
	// DryRun is set when nothing was deleted and Deleted is what would have been.
	DryRun bool `json:"dry_run,omitempty"`
}

func init() {
	register(func(g *Globals) *cobra.Command {
		var dryRun, yes bool
		var ff *filterFlags
		cmd := &cobra.Command{
			Use:   "delete [ID...]",
			Short: "Delete tasks by id, or every task matching filters",
			Long: `Delete the given tasks, or, with filter flags and no ids, every task matching
the filters. A filter is required so a store is never wiped by accident;
--dry-run prints how many tasks the filters match without deleting. By filter,
the command asks on a terminal with the count first; --yes skips the question,
and is required where there is no terminal (scripts). Deleting
a pending task that others depend on aborts the dependents.`,
			Example: `  norn delete job-1 job-2
  norn delete -q emails -s terminal --dry-run
  norn delete -s failed --created-before 720h --yes`,
			RunE: func(cmd *cobra.Command, args []string) error {
				format, f, err := ff.idsOrFilterArgs(g, "delete", args, dryRun)
				if err != nil {
					return err
				}
				return withClient(g, func(c *client.Client) error {
					if len(args) == 0 {
						return bulkByFilter(cmd, format, "delete", "deleted", dryRun, yes,
							func() (int64, error) { return c.Count(cmd.Context(), f) },
							func() (int64, error) { return c.DeleteMatching(cmd.Context(), f) },
							func(n int64, dry bool) any { return deleteOutput{Deleted: n, DryRun: dry} })
					}
					var out deleteOutput
					failed := 0
					for _, id := range args {
						if err := c.Delete(cmd.Context(), id); err != nil {
							failed++
							fmt.Fprintf(cmd.ErrOrStderr(), "norn: delete %s: %v\n", id, err)
							continue
						}
						out.Deleted++
					}
					w := cmd.OutOrStdout()
					if format != outTable {
						if err := emit(w, format, out); err != nil {
							return err
						}
					} else {
						fmt.Fprintf(w, "deleted %s\n", nTasks(out.Deleted))
					}
					if failed > 0 {
						return fmt.Errorf("%d of %d tasks could not be deleted", failed, len(args))
					}
					return nil
				})
			},
		}
		ff = addFilterFlags(cmd.Flags())
		cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only count what the filters match")
		cmd.Flags().BoolVarP(&yes, "yes", "y", false, "delete by filter without asking (required without a terminal)")
		return clientCommand(cmd)
	})
}
