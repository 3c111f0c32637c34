package cli

import (
	"fmt"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

// countOutput is the JSON form of `norn count` (the API's count body).
type countOutput struct {
	Count  int64             `json:"count"`
	Groups []norn.GroupCount `json:"groups,omitempty"`
}

func init() {
	register(func(g *Globals) *cobra.Command {
		var group bool
		var ff *filterFlags
		cmd := &cobra.Command{
			Use:   "count",
			Short: "Count tasks matching filters, optionally grouped by queue and status",
			Example: `  norn count -q emails -s pending
  norn count --group -s terminal`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				format, err := outputFormat(g)
				if err != nil {
					return err
				}
				f, err := ff.filter(time.Now())
				if err != nil {
					return err
				}
				return withClient(g, func(c *client.Client) error {
					var out countOutput
					if group {
						gs, err := c.CountGrouped(cmd.Context(), f)
						if err != nil {
							return err
						}
						out.Groups = gs
						for _, gc := range gs {
							out.Count += gc.Count
						}
					} else if out.Count, err = c.Count(cmd.Context(), f); err != nil {
						return err
					}
					w := cmd.OutOrStdout()
					if format != outTable {
						if group && out.Groups == nil {
							out.Groups = []norn.GroupCount{}
						}
						return emit(w, format, out)
					}
					if !group {
						fmt.Fprintln(w, out.Count)
						return nil
					}
					tab := newTable(w, "QUEUE", "STATUS", "COUNT")
					for _, gc := range out.Groups {
						tab.row(gc.Queue, string(gc.Status), fmt.Sprint(gc.Count))
					}
					tab.row("total", "", fmt.Sprint(out.Count))
					return tab.flush()
				})
			},
		}
		ff = addFilterFlags(cmd.Flags())
		cmd.Flags().BoolVarP(&group, "group", "g", false, "count by queue and status")
		return clientCommand(cmd)
	})
}
