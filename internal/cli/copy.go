package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/storecopy"
	"github.com/nornq/norn/internal/storeopen"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		var from, to, schema string
		var o storecopy.Options
		cmd := &cobra.Command{
			Use:   "copy --from STORE --to STORE",
			Short: "Copy every task, setting and schedule of one store into another, then check both hold the same",
			Long: `Copies the store --from into the store --to: queue and key settings, every task as it is stored
(status, lease, attempts, history, errors, result, update log, version, unique key) and the schedules;
then compares both (counts by queue and status, and a checksum over every task). A store is
embedded:PATH or a postgres:// URL, as for 'norn server --store'. Either kind can be the
destination: PostgreSQL for the move to a cluster, an embedded data directory for the way back.

Stop every server using the source first (an embedded data directory cannot be opened while a server
holds it), and start the servers on the destination after the copy: neither store's monitor runs
during it. Memory stays constant; a copy interrupted is continued with --resume, which skips the
tasks already copied. A destination that holds tasks is refused unless --resume or --into-non-empty
says so. Tasks that were running keep their leases; their workers register again with the new
servers, so their attempts time out at their deadline and run again (drain the source first to
avoid that). See docs/moving.md.`,
			Example: `  norn copy --from embedded:./norn-data --to postgres://norn:secret@db.example.com/norn
  norn copy --from embedded:./norn-data --to postgres://… --resume`,
			Args: exactArgs(0, "no arguments, only --from STORE and --to STORE"),
			RunE: func(cmd *cobra.Command, args []string) error {
				if from == "" || to == "" {
					return norn.Invalid("from", "give both --from STORE and --to STORE, e.g. --from embedded:./norn-data --to postgres://…")
				}
				ctx := cmd.Context()
				src, err := storeopen.Open(ctx, from, storeopen.Options{NoMonitor: true, Schema: schema, MinFreeBytes: -1})
				if err != nil {
					return fmt.Errorf("--from: %w", err)
				}
				defer src.Close()
				st, err := storeopen.Open(ctx, to, storeopen.Options{NoMonitor: true, Schema: schema, Migrate: true})
				if err != nil {
					return fmt.Errorf("--to: %w", err)
				}
				defer st.Close()
				dst, ok := st.(storecopy.Destination)
				if !ok {
					return norn.Invalid("to", "this kind of store cannot take tasks as they are; copy into PostgreSQL (postgres://…) or an embedded data directory (embedded:PATH)")
				}
				var bar *Progress // made at the first batch, when the total is known
				o.Progress = func(done, total int64) {
					if bar == nil {
						bar = NewProgress(os.Stderr, "copying", "tasks", total)
					}
					bar.Set(done, done)
				}
				rep, err := storecopy.Copy(ctx, src, dst, o)
				if bar != nil {
					bar.Finish()
				}
				if err != nil {
					return err
				}
				format, err := outputFormat(g)
				if err != nil {
					return err
				}
				if format != "table" {
					return writeJSON(cmd.OutOrStdout(), rep)
				}
				out := cmd.OutOrStdout()
				fmt.Fprintf(out, "copied %d tasks (%d written, %d there already), %d queues, %d schedules, %d batches in %s\n",
					rep.Tasks, rep.Imported, rep.Tasks-rep.Imported, rep.Queues, rep.Schedules, rep.Batches, rep.Took.Round(1e6))
				if !rep.Check.Same {
					for _, d := range rep.Check.Differences {
						fmt.Fprintln(out, "difference:", d)
					}
					return fmt.Errorf("the destination does not hold the same as the source")
				}
				fmt.Fprintf(out, "check: same counts by queue and status, same checksum %s\n", rep.Check.Checksum[:16])
				return nil
			},
		}
		f := cmd.Flags()
		f.StringVar(&from, "from", "", "the store to copy from: embedded:PATH or postgres://…")
		f.StringVar(&to, "to", "", "the store to copy into: postgres://… (migrated first) or embedded:PATH")
		f.StringVar(&schema, "schema", "", "the PostgreSQL schema of both stores (default norn)")
		f.BoolVar(&o.Resume, "resume", false, "continue an interrupted copy: skip the tasks already in the destination")
		f.BoolVar(&o.IntoNonEmpty, "into-non-empty", false, "add to a destination that holds other tasks")
		f.IntVar(&o.Batch, "batch", 500, "tasks per write")
		return cmd
	})
}
