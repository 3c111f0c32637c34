package cli

import (
	"encoding/json"
	"fmt"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		var list bool
		var after uint64
		cmd := &cobra.Command{
			Use:   "signal TASK NAME [DATA]",
			Short: "Send a signal to a task, or list its signals",
			Long: `Send a named signal, with optional JSON data, to a task that has not ended.
A task whose worker snoozed it until a signal of that name becomes ready at
once. With --list, print the task's signals instead (after --after).`,
			Example: `  norn signal payout-42 approval '{"by":"ada"}'
  norn signal payout-42 --list
  norn signal payout-42 --list --after 3 -o json`,
			Args: func(cmd *cobra.Command, args []string) error {
				switch {
				case list && len(args) != 1:
					return usagef("--list takes the task's id only")
				case !list && (len(args) < 2 || len(args) > 3):
					return usagef("give the task's id, the signal's name and optionally its data")
				}
				return nil
			},
			RunE: clientRun(g, func(cmd *cobra.Command, args []string, format string, c *client.Client) error {
				w := cmd.OutOrStdout()
				if list {
					sigs, err := c.Signals(cmd.Context(), args[0], after)
					if err != nil {
						return err
					}
					if format != outTable {
						return emitAll(w, format, sigs)
					}
					if len(sigs) == 0 {
						fmt.Fprintln(cmd.ErrOrStderr(), "(no signals)")
					}
					for _, sg := range sigs {
						fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", sg.Seq, sg.Time.Local().Format("2006-01-02 15:04:05"), sg.Name, string(sg.Data))
					}
					return nil
				}
				ns := norn.NewSignal{Name: args[1]}
				if len(args) == 3 {
					if !json.Valid([]byte(args[2])) {
						return usagef("DATA must be JSON, got %q (quote a string: '\"text\"')", args[2])
					}
					ns.Data = json.RawMessage(args[2])
				}
				sg, err := c.Signal(cmd.Context(), args[0], ns)
				if err != nil {
					return err
				}
				if format != outTable {
					return writeJSON(w, sg)
				}
				fmt.Fprintf(w, "signal %d %q sent to %s\n", sg.Seq, sg.Name, args[0])
				return nil
			}),
		}
		cmd.Flags().BoolVar(&list, "list", false, "list the task's signals instead of sending one")
		cmd.Flags().Uint64Var(&after, "after", 0, "with --list: only signals after this sequence number")
		return cmd
	})
}
