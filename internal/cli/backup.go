package cli

import (
	"fmt"
	"strings"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/nornq/norn/store/embedded"
	"github.com/spf13/cobra"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		var dataDir string
		cmd := &cobra.Command{
			Use:   "backup DIR",
			Short: "Copy the embedded store into a new directory, online or from a stopped data directory",
			Long: `Writes a consistent copy of the embedded store into DIR, a directory that must not exist yet.

Without --data-dir the running server (--server) takes the backup while it serves: DIR is a path on
the server's machine, and the token must be an admin's. With --data-dir the data directory of a
stopped server is opened and copied here. The backup holds every write acknowledged before it
started; it is written into DIR.partial and renamed when complete, so a crash leaves DIR.partial,
never a DIR that looks whole. A backup is a data directory: open it with
'norn server --store embedded:DIR', or copy it into place with 'norn restore'.`,
			Example: `  norn backup /var/backups/norn-2026-11-28
  norn backup --data-dir ./norn-data ./norn-backup`,
			Args: exactArgs(1, "DIR, the new directory the backup goes into"),
			RunE: func(cmd *cobra.Command, args []string) error {
				format, err := outputFormat(g)
				if err != nil {
					return err
				}
				var info norn.BackupInfo
				if dataDir != "" {
					s, err := embedded.Open(cmd.Context(), embedded.Options{Dir: dataDir, ManualSweep: true, MinFreeBytes: -1})
					if err != nil {
						return err
					}
					info, err = s.Backup(cmd.Context(), args[0])
					if cerr := s.Close(); err == nil {
						err = cerr
					}
					if err != nil {
						return err
					}
				} else if err := withClient(g, func(c *client.Client) error {
					info, err = c.Backup(cmd.Context(), args[0])
					return err
				}); err != nil {
					return err
				}
				if format != "table" {
					return writeJSON(cmd.OutOrStdout(), info)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "backup in %s: %s, took %s\n", info.Dir, bytesHuman(info.Bytes), info.Took.D().Round(1e6))
				return nil
			},
		}
		cmd.Flags().StringVar(&dataDir, "data-dir", "", "the data directory of a stopped server to copy (default: ask the running server)")
		return cmd
	})
	register(func(g *Globals) *cobra.Command {
		return &cobra.Command{
			Use:   "restore BACKUP DATA-DIR",
			Short: "Copy a backup into a new data directory, checked by opening it",
			Long: `Copies the backup BACKUP (made by 'norn backup') into DATA-DIR, a directory that must not exist
yet, so a server's data directory is never overwritten; then opens the copy to check it. Start a
server on it with 'norn server --store embedded:DATA-DIR'.`,
			Example: `  norn restore /var/backups/norn-2026-11-28 ./norn-data`,
			Args:    exactArgs(2, "BACKUP and DATA-DIR"),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := embedded.Restore(cmd.Context(), args[0], args[1]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "restored %s into %s\n", args[0], args[1])
				return nil
			},
		}
	})
}

// exactArgs wants n arguments, and says which when they are not there.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s needs %s (got %d argument%s); see '%s --help'", cmd.CommandPath(), what, len(args),
				map[bool]string{true: "", false: "s"}[len(args) == 1], cmd.CommandPath())
		}
		return nil
	}
}

func bytesHuman(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return strings.TrimSuffix(fmt.Sprintf("%.1f", f), ".0") + " " + units[i]
}
