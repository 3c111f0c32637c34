package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/nornq/norn/internal/pgtest"
	"github.com/nornq/norn/store/postgres"
)

func runMigrate(t *testing.T, args ...string) (postgres.MigrationStatus, error) {
	t.Helper()
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"-o", "json", "migrate"}, args...))
	err := root.ExecuteContext(context.Background())
	var st postgres.MigrationStatus
	if err == nil {
		if jerr := json.Unmarshal(out.Bytes(), &st); jerr != nil {
			t.Fatalf("migrate %v: output %q: %v", args, out.String(), jerr)
		}
	}
	return st, err
}

func TestMigrateCommand(t *testing.T) {
	t.Setenv("NORN_DATABASE_URL", "") // the flag default must not come from the environment
	c := pgtest.NewCluster(t)
	url := c.URL()
	latest := postgres.LatestVersion()
	st, err := runMigrate(t, "status", "--database-url", url, "--schema", "m1")
	if err != nil || st.Current != 0 || len(st.Pending) != latest {
		t.Fatalf("status before: %+v, %v", st, err)
	}
	st, err = runMigrate(t, "up", "--database-url", url, "--schema", "m1")
	if err != nil || st.Current != latest {
		t.Fatalf("up: %+v, %v", st, err)
	}
	// Another schema in the same database is independent.
	st, err = runMigrate(t, "status", "--database-url", url, "--schema", "m2")
	if err != nil || st.Current != 0 {
		t.Fatalf("status of another schema: %+v, %v", st, err)
	}
	st, err = runMigrate(t, "down", "--database-url", url, "--schema", "m1")
	if err != nil || st.Current != latest-1 {
		t.Fatalf("down: %+v, %v", st, err)
	}
	_, err = runMigrate(t, "up")
	var ue *usageError
	if !errors.As(err, &ue) {
		t.Fatalf("up without --database-url: %v, want a usage error", err)
	}
	_, err = runMigrate(t, "up", "x", "--database-url", url)
	if !errors.As(err, &ue) {
		t.Fatalf("up with a bad version: %v, want a usage error", err)
	}
}
