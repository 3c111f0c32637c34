package cli

import (
	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		cmd := &cobra.Command{
			Use:   "cancel ID...",
			Short: "Cancel tasks (scheduled, blocked, ready or running)",
			Long: `Cancel each task. A running task's worker learns of it on its next
heartbeat. Cancelling a cancelled task is not an error; a completed or
aborted task cannot be cancelled. Every id is tried; the exit code is 1 if
any failed.`,
			Example: `  norn cancel job-1 job-2`,
			Args:    cobra.MinimumNArgs(1),
			RunE: clientRun(g, func(cmd *cobra.Command, args []string, format string, c *client.Client) error {
				return perTask(cmd, format, "cancel", args, func(id string) (*norn.Task, error) {
					return c.Cancel(cmd.Context(), id)
				})
			}),
		}
		return clientCommand(cmd)
	})
}
