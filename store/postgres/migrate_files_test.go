package postgres

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
)

func TestMigrationFiles(t *testing.T) {
	file := func(names ...string) fstest.MapFS {
		m := fstest.MapFS{}
		for _, n := range names {
			m["migrations/"+n] = &fstest.MapFile{Data: []byte("SELECT 1;")}
		}
		return m
	}
	tests := []struct {
		name    string
		fsys    fstest.MapFS
		want    int    // migrations loaded when wantErr is ""
		wantErr string // part of the error
	}{
		{"in order", file("0001_a.up.sql", "0001_a.down.sql", "0002_b.up.sql", "0002_b.down.sql"), 2, ""},
		{"a gap", file("0001_a.up.sql", "0001_a.down.sql", "0003_c.up.sql", "0003_c.down.sql"), 0, "without gaps"},
		{"two migrations with one number", file("0001_a.up.sql", "0001_a.down.sql", "0001_b.up.sql", "0001_b.down.sql"), 0, "share version 1"},
		{"no down file", file("0001_a.up.sql"), 0, "both up and down"},
		{"a stray file", file("0001_a.up.sql", "0001_a.down.sql", "notes.txt"), 0, "want NNNN_name"},
		{"version zero", file("0000_a.up.sql", "0000_a.down.sql"), 0, "bad version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := loadMigrationsFrom(tt.fsys)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || len(ms) != tt.want {
				t.Fatalf("loaded %d, err %v; want %d", len(ms), err, tt.want)
			}
		})
	}
	if _, err := loadMigrations(); err != nil {
		t.Fatalf("the shipped migrations: %v", err)
	}
}

// released pins the files of every released migration: a released
// migration is never edited or squashed (a database that applied it would
// not get the change), so a schema change is always a new numbered file.
// The baseline is pinned as the first release will ship it; until then a
// deliberate squash (proven by an identical pg_dump --schema-only of the
// old chain and the new baseline) is the one change that updates a pin.
var released = map[string]string{
	"0001_baseline.up.sql":   "1503d712c3d3f11f20b1913caccc958c478f4297bc71d86c944f7372eca1767e",
	"0001_baseline.down.sql": "61e65f05f2dfccbe306f9d9a85f53e8ba6bedbc9806e1456a29fdca02d2a78ad",
}

func TestReleasedMigrationsNeverChange(t *testing.T) {
	for name, want := range released {
		b, err := migrationFS.ReadFile("migrations/" + name)
		if err != nil {
			t.Fatalf("released migration %s: %v", name, err)
		}
		if got := fmt.Sprintf("%x", sha256.Sum256(b)); got != want {
			t.Errorf("released migration %s changed (sha256 %s): add a new migration instead", name, got)
		}
	}
}
