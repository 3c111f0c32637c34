package cli

import (
	"fmt"
	"time"

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
				format, err := outputFormat(g)
				if err != nil {
					return err
				}
				f, err := ff.filter(time.Now())
				if err != nil {
					return err
				}
				if err := idsOrFilter("delete", args, &f, dryRun); err != nil {
					return err
				}
				return withClient(g, func(c *client.Client) error {
					var out deleteOutput
					failed := 0
					switch {
					case dryRun:
						out.DryRun = true
						if out.Deleted, err = c.Count(cmd.Context(), f); err != nil {
							return err
						}
					case len(args) > 0:
						for _, id := range args {
							if err := c.Delete(cmd.Context(), id); err != nil {
								failed++
								fmt.Fprintf(cmd.ErrOrStderr(), "norn: delete %s: %v\n", id, err)
								continue
							}
							out.Deleted++
						}
					default:
						n, err := c.Count(cmd.Context(), f)
						if err != nil {
							return err
						}
						if err := confirmBulk(cmd.InOrStdin(), cmd.ErrOrStderr(), "delete", n, yes); err != nil {
							return err
						}
						if out.Deleted, err = c.DeleteMatching(cmd.Context(), f); err != nil {
							return err
						}
					}
					w := cmd.OutOrStdout()
					if format != outTable {
						if err := emit(w, format, out); err != nil {
							return err
						}
					} else if dryRun {
						fmt.Fprintf(w, "would delete %s\n", nTasks(out.Deleted))
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
