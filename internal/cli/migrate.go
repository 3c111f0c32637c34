package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/nornq/norn/store/postgres"
)

func init() { register(newMigrateCmd) }

// newMigrateCmd builds `norn migrate up|down|status`, which manages the
// PostgreSQL schema of cluster mode.
// migrateFlags are the flags of norn migrate, shared by its subcommands.
type migrateFlags struct {
	g             *Globals
	dbURL, schema string
}

func newMigrateCmd(g *Globals) *cobra.Command {
	m := &migrateFlags{g: g}
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Manage the PostgreSQL schema (cluster mode)",
		Long: "Apply, roll back or show Norn's schema migrations in a PostgreSQL database.\n" +
			"The migrations are embedded in this binary; each step runs in its own transaction.",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&m.dbURL, "database-url", os.Getenv("NORN_DATABASE_URL"), "PostgreSQL URL (env NORN_DATABASE_URL)")
	pf.StringVar(&m.schema, "schema", postgres.DefaultSchema, "schema holding Norn's tables")
	cmd.AddCommand(m.upCmd(), m.downCmd(), m.statusCmd())
	return cmd
}

func (m *migrateFlags) need() error {
	if m.dbURL == "" {
		return &usageError{msg: "--database-url (or NORN_DATABASE_URL) is required"}
	}
	return nil
}

func (m *migrateFlags) print(cmd *cobra.Command, st postgres.MigrationStatus) error {
	if m.g.Output == "json" || m.g.Output == "ndjson" {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(st)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintf(w, "schema %q: version %d of %d\n", m.schema, st.Current, st.Latest)
	for _, a := range st.Applied {
		fmt.Fprintf(w, "  applied  %4d  %-20s  %s\n", a.Version, a.Name, a.AppliedAt.Format("2006-01-02 15:04:05Z"))
	}
	for _, v := range st.Pending {
		fmt.Fprintf(w, "  pending  %4d\n", v)
	}
	return nil
}

func (m *migrateFlags) upCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "up [version]",
		Short: "Apply pending migrations (up to version, default the latest)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := m.need(); err != nil {
				return err
			}
			target := -1
			if len(args) == 1 {
				v, err := strconv.Atoi(args[0])
				if err != nil || v < 0 {
					return &usageError{msg: fmt.Sprintf("version %q is not a non-negative number", args[0])}
				}
				target = v
			}
			cur, err := postgres.Status(cmd.Context(), m.dbURL, m.schema)
			if err != nil {
				return err
			}
			if target >= 0 && target < cur.Current {
				return &usageError{msg: fmt.Sprintf("schema is at version %d; use `norn migrate down %d` to go back", cur.Current, target)}
			}
			st, err := postgres.Migrate(cmd.Context(), m.dbURL, m.schema, target)
			if err != nil {
				return err
			}
			return m.print(cmd, st)
		},
	}
}

func (m *migrateFlags) downCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "down [version]",
		Short: "Roll back to version (default: one step back; 0 removes every table)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := m.need(); err != nil {
				return err
			}
			cur, err := postgres.Status(cmd.Context(), m.dbURL, m.schema)
			if err != nil {
				return err
			}
			target := max(cur.Current-1, 0)
			if len(args) == 1 {
				v, err := strconv.Atoi(args[0])
				if err != nil || v < 0 {
					return &usageError{msg: fmt.Sprintf("version %q is not a non-negative number", args[0])}
				}
				if v > cur.Current {
					return &usageError{msg: fmt.Sprintf("schema is at version %d; use `norn migrate up %d` to go forward", cur.Current, v)}
				}
				target = v
			}
			st, err := postgres.Migrate(cmd.Context(), m.dbURL, m.schema, target)
			if err != nil {
				return err
			}
			return m.print(cmd, st)
		},
	}
}

func (m *migrateFlags) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show applied and pending migrations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := m.need(); err != nil {
				return err
			}
			st, err := postgres.Status(cmd.Context(), m.dbURL, m.schema)
			if err != nil {
				return err
			}
			return m.print(cmd, st)
		},
	}
}
