package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nornq/norn"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one versioned schema change shipped in the binary.
type Migration struct {
	Version int
	Name    string
	up      string
	down    string
}

// MigrationStatus reports where a schema stands.
type MigrationStatus struct {
	// Current is the applied version (0: nothing applied).
	Current int
	// Latest is the newest version this binary knows.
	Latest int
	// Applied lists applied versions with when they were applied.
	Applied []AppliedMigration
	// Pending lists known versions not applied yet.
	Pending []int
}

// AppliedMigration is one row of schema_migrations.
type AppliedMigration struct {
	Version   int       `json:"version"`
	Name      string    `json:"name"`
	AppliedAt time.Time `json:"applied_at"`
}

// Migrations returns the migrations embedded in this binary, oldest first.
func Migrations() []Migration {
	ms, err := loadMigrations()
	if err != nil {
		// The files are embedded at build time; a malformed name is a
		// programming error caught by TestMigrationsWellFormed.
		panic(err)
	}
	return ms
}

func loadMigrations() ([]Migration, error) { return loadMigrationsFrom(migrationFS) }

// loadMigrationsFrom reads the migrations directory of fsys.
func loadMigrationsFrom(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, "migrations")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		name := e.Name()
		base, dir, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), ".")
		if !ok || (dir != "up" && dir != "down") {
			return nil, fmt.Errorf("migration file %q: want NNNN_name.up.sql or NNNN_name.down.sql", name)
		}
		num, label, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %q: bad version", name)
		}
		body, err := fs.ReadFile(fsys, "migrations/"+name)
		if err != nil {
			return nil, err
		}
		m := byVersion[v]
		if m == nil {
			m = &Migration{Version: v, Name: label}
			byVersion[v] = m
		} else if m.Name != label {
			// Two branches that each took the next free number: one would
			// silently replace the other's files.
			return nil, fmt.Errorf("migrations %q and %q share version %d: renumber one", m.Name, label, v)
		}
		if dir == "up" {
			m.up = string(body)
		} else {
			m.down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.up == "" || m.down == "" {
			return nil, fmt.Errorf("migration %d: both up and down files are required", m.Version)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration versions must be 1..n without gaps; found %d at position %d", m.Version, i+1)
		}
	}
	return out, nil
}

// LatestVersion is the newest schema version this binary knows.
func LatestVersion() int { return len(Migrations()) }

func quoteIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

// migrationLockKey serialises concurrent migrators (several nodes started
// with --migrate at once) on one advisory lock per schema.
func migrationLockKey(schema string) int64 { return lockKey("norn-migrate:" + schema) }

// Migrate moves the schema in dbURL to version target (-1: the latest; 0:
// everything removed) and returns the status afterwards. Each step runs in
// its own transaction together with its schema_migrations row, so a failed
// step leaves the schema at the previous version.
func Migrate(ctx context.Context, dbURL, schema string, target int) (MigrationStatus, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	ms := Migrations()
	if target < 0 {
		target = len(ms)
	}
	if target > len(ms) {
		return MigrationStatus{}, norn.Invalid("target", "version %d is newer than the newest known (%d)", target, len(ms))
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return MigrationStatus{}, norn.Unavailable(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrationLockKey(schema)); err != nil {
		return MigrationStatus{}, mapErr(err)
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", migrationLockKey(schema)) //nolint:errcheck
	if err := ensureMigrationsTable(ctx, conn, schema); err != nil {
		return MigrationStatus{}, err
	}
	cur, err := currentVersion(ctx, conn, schema)
	if err != nil {
		return MigrationStatus{}, err
	}
	if cur > len(ms) {
		return MigrationStatus{}, newerSchemaError(schema, cur, len(ms))
	}
	q := quoteIdent(schema)
	for cur < target {
		m := ms[cur]
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, strings.ReplaceAll(m.up, "{{schema}}", q)); err != nil {
				return fmt.Errorf("migration %d (%s) up: %w", m.Version, m.Name, err)
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+q+".schema_migrations (version, name, applied_at) VALUES ($1, $2, clock_timestamp())", m.Version, m.Name)
			return err
		})
		if err != nil {
			return MigrationStatus{}, mapErr(err)
		}
		cur++
	}
	for cur > target {
		m := ms[cur-1]
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, strings.ReplaceAll(m.down, "{{schema}}", q)); err != nil {
				return fmt.Errorf("migration %d (%s) down: %w", m.Version, m.Name, err)
			}
			_, err := tx.Exec(ctx, "DELETE FROM "+q+".schema_migrations WHERE version = $1", m.Version)
			return err
		})
		if err != nil {
			return MigrationStatus{}, mapErr(err)
		}
		cur--
	}
	return status(ctx, conn, schema)
}

// Status reports the schema's applied and pending migrations without changing anything.
func Status(ctx context.Context, dbURL, schema string) (MigrationStatus, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return MigrationStatus{}, norn.Unavailable(err)
	}
	defer conn.Close(context.Background())
	return status(ctx, conn, schema)
}

func status(ctx context.Context, conn *pgx.Conn, schema string) (MigrationStatus, error) {
	st := MigrationStatus{Latest: LatestVersion()}
	exists, err := migrationsTableExists(ctx, conn, schema)
	if err != nil {
		return st, err
	}
	if exists {
		rows, err := conn.Query(ctx, "SELECT version, name, applied_at FROM "+quoteIdent(schema)+".schema_migrations ORDER BY version")
		if err != nil {
			return st, mapErr(err)
		}
		st.Applied, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (AppliedMigration, error) {
			var a AppliedMigration
			err := row.Scan(&a.Version, &a.Name, &a.AppliedAt)
			a.AppliedAt = a.AppliedAt.UTC()
			return a, err
		})
		if err != nil {
			return st, mapErr(err)
		}
		for _, a := range st.Applied {
			st.Current = max(st.Current, a.Version)
		}
	}
	for v := st.Current + 1; v <= st.Latest; v++ {
		st.Pending = append(st.Pending, v)
	}
	return st, nil
}

func migrationsTableExists(ctx context.Context, q querier, schema string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", quoteIdent(schema)+".schema_migrations").Scan(&ok)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "3F000" { // schema does not exist
			return false, nil
		}
		return false, mapErr(err)
	}
	return ok, nil
}

func ensureMigrationsTable(ctx context.Context, conn *pgx.Conn, schema string) error {
	q := quoteIdent(schema)
	_, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q+"; CREATE TABLE IF NOT EXISTS "+q+
		".schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)")
	return mapErr(err)
}

func currentVersion(ctx context.Context, q querier, schema string) (int, error) {
	exists, err := migrationsTableExists(ctx, q, schema)
	if err != nil || !exists {
		return 0, err
	}
	var v int
	if err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+quoteIdent(schema)+".schema_migrations").Scan(&v); err != nil {
		return 0, mapErr(err)
	}
	return v, nil
}

func newerSchemaError(schema string, cur, latest int) error {
	return norn.Errorf(norn.CodeUnavailable, "schema %q is at version %d, newer than this binary knows (%d): upgrade norn before using this database", schema, cur, latest)
}

// checkSchema refuses a schema that is not exactly at the latest version.
func checkSchema(ctx context.Context, q querier, schema string) error {
	cur, err := currentVersion(ctx, q, schema)
	if err != nil {
		return err
	}
	latest := LatestVersion()
	switch {
	case cur > latest:
		return newerSchemaError(schema, cur, latest)
	case cur < latest:
		return norn.Errorf(norn.CodeUnavailable, "schema %q is at version %d but this binary needs %d: run `norn migrate up --database-url ... --schema %s` or start with --migrate (Config.Migrate)", schema, cur, latest, schema)
	}
	return nil
}
