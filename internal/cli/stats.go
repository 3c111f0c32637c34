package cli

import (
	"fmt"
	"sort"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		cmd := &cobra.Command{
			Use:   "stats",
			Short: "Show task counts by queue and status, totals and workers",
			Args:  cobra.NoArgs,
			RunE: clientRun(g, func(cmd *cobra.Command, args []string, format string, c *client.Client) error {
				st, err := c.Stats(cmd.Context())
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if format != outTable {
					return emit(w, format, st)
				}
				byQueue := map[string]map[norn.Status]int64{}
				for _, gc := range st.Counts {
					if byQueue[gc.Queue] == nil {
						byQueue[gc.Queue] = map[norn.Status]int64{}
					}
					byQueue[gc.Queue][gc.Status] += gc.Count
				}
				names := make([]string, 0, len(byQueue))
				for q := range byQueue {
					names = append(names, q)
				}
				sort.Strings(names)
				tab := newTable(w, append([]string{"QUEUE"}, statusHeader()...)...)
				for _, q := range names {
					tab.row(append([]string{q}, statusCounts(byQueue[q])...)...)
				}
				tab.row(append([]string{"total"}, statusCounts(st.Totals)...)...)
				if err := tab.flush(); err != nil {
					return err
				}
				fmt.Fprintf(w, "\n%d tasks; %d workers registered, %d active\n", st.Total, st.Workers, st.ActiveWorkers)
				return nil
			}),
		}
		return clientCommand(cmd)
	})
}
