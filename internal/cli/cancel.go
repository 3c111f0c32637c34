package cli

import (
	"fmt"

	"github.com/nornq/norn"
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
			RunE: func(cmd *cobra.Command, args []string) error {
				format, c, err := formatAndClient(g)
				if err != nil {
					return err
				}
				defer c.Close()
				w := cmd.OutOrStdout()
				var done []*norn.Task
				failed := 0
				for _, id := range args {
					t, err := c.Cancel(cmd.Context(), id)
					if err != nil {
						failed++
						fmt.Fprintf(cmd.ErrOrStderr(), "norn: cancel %s: %v\n", id, err)
						continue
					}
					done = append(done, t)
					if format == outTable {
						fmt.Fprintf(w, "%s cancelled\n", t.ID)
					}
				}
				switch format {
				case outJSON:
					if done == nil {
						done = []*norn.Task{}
					}
					if err := writeJSON(w, done); err != nil {
						return err
					}
				case outNDJSON:
					for _, t := range done {
						if err := writeNDJSONLine(w, t); err != nil {
							return err
						}
					}
				}
				if failed > 0 {
					return fmt.Errorf("%d of %d tasks could not be cancelled", failed, len(args))
				}
				return nil
			},
		}
		return clientCommand(cmd)
	})
}
