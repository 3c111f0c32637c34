package embedded

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nornq/norn"
)

// corruptFixture writes tasks, flushes some of them into a table and
// leaves the rest in the write-ahead log, and closes the store.
func corruptFixture(t *testing.T) (dir string, ids []string) {
	t.Helper()
	ctx := context.Background()
	dir = t.TempDir()
	s, err := Open(ctx, Options{Dir: dir, ManualSweep: true, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	spec := []byte(`{"pad":"` + strings.Repeat("x", 500) + `"}`)
	for i := range 400 {
		id := fmt.Sprintf("task-%04d", i)
		if _, err := s.Submit(ctx, norn.NewTask{ID: id, Queue: "q", Spec: spec}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if i == 199 {
			if err := s.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, ids
}

func filesLike(t *testing.T, dir, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil || len(m) == 0 {
		all, _ := os.ReadDir(dir)
		var names []string
		for _, e := range all {
			names = append(names, e.Name())
		}
		t.Fatalf("no %s in %s: %v", pattern, names, err)
	}
	return m
}

func flip(t *testing.T, path string, at func(size int) int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := at(len(b))
	b[i] ^= 0x20
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A flipped byte in a table or in the middle of the write-ahead log is
// found at open (or at the first read of it) with an error naming the
// file; no task silently disappears. (A flipped byte in the MANIFEST is
// not: Pebble takes any bad MANIFEST record for a torn tail; see
// docs/reliability.md.)
func TestCorruptionDetected(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pattern string
		at      func(size int) int
	}{
		{"table", "*.sst", func(n int) int { return n / 3 }},
		{"wal middle", "*.log", func(n int) int { return n / 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir, ids := corruptFixture(t)
			files := filesLike(t, dir, tc.pattern)
			target := files[len(files)-1]
			flip(t, target, tc.at)
			s, err := Open(ctx, Options{Dir: dir, ManualSweep: true, Logger: quietLog()})
			if err != nil {
				if !strings.Contains(err.Error(), filepath.Base(target)) {
					t.Fatalf("open failed without naming %s: %v", filepath.Base(target), err)
				}
				t.Logf("detected at open: %v", err)
				return
			}
			defer s.Close()
			missing := 0
			for _, id := range ids {
				if _, err := s.Get(ctx, id); err != nil {
					if norn.CodeOf(err) == norn.CodeNotFound {
						missing++
						continue
					}
					if !strings.Contains(err.Error(), filepath.Base(target)) {
						t.Fatalf("read of %s failed without naming %s: %v", id, filepath.Base(target), err)
					}
					t.Logf("detected at read: %v", err)
					return
				}
			}
			t.Fatalf("a flipped byte in %s went unnoticed: %d of %d tasks silently missing", filepath.Base(target), missing, len(ids))
		})
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A torn tail of the write-ahead log (the last write cut short by a crash)
// is the one damage repaired at open: everything before it is there.
func TestTornWALTailRepaired(t *testing.T) {
	ctx := context.Background()
	dir, ids := corruptFixture(t)
	logs := filesLike(t, dir, "*.log")
	wal := logs[len(logs)-1]
	st, err := os.Stat(wal)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(wal, st.Size()-10); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, Options{Dir: dir, ManualSweep: true, Logger: quietLog()})
	if err != nil {
		t.Fatalf("open after a torn tail: %v", err)
	}
	defer s.Close()
	missing := 0
	for i, id := range ids {
		if _, err := s.Get(ctx, id); err != nil {
			if norn.CodeOf(err) != norn.CodeNotFound || i < len(ids)-1 {
				t.Errorf("%s after a torn tail: %v", id, err)
			}
			missing++
		}
	}
	t.Logf("the torn last record took %d task(s) with it", missing)
	if _, err := s.Submit(ctx, norn.NewTask{ID: "after", Queue: "q"}); err != nil {
		t.Fatalf("submit after repair: %v", err)
	}
}
