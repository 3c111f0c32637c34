package cli

import (
	"fmt"

	"github.com/nornq/norn/internal/buildinfo"
	"github.com/spf13/cobra"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		return &cobra.Command{
			Use:   "version",
			Short: "Print which build of norn this is: version, commit and Go version",
			Example: `  norn version
  norn version -o json`,
			Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, args []string) error {
				format, err := outputFormat(g)
				if err != nil {
					return err
				}
				bi := buildinfo.Read()
				if format != "table" {
					return writeJSON(cmd.OutOrStdout(), bi)
				}
				w := cmd.OutOrStdout()
				fmt.Fprintf(w, "norn %s\n", bi.Version)
				if bi.Revision != "" {
					mod := ""
					if bi.Modified {
						mod = " (with uncommitted changes)"
					}
					fmt.Fprintf(w, "commit %s%s\n", bi.Revision, mod)
				}
				if bi.Time != "" {
					fmt.Fprintf(w, "committed %s\n", bi.Time)
				}
				fmt.Fprintf(w, "built with %s\n", bi.GoVersion)
				return nil
			},
		}
	})
}
