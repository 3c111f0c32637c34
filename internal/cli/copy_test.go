package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/pgtest"
	"github.com/nornq/norn/internal/storecopy"
	"github.com/nornq/norn/store/embedded"
)

func runCopy(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := NewRoot()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"copy"}, args...))
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

// TestCopyCommand: an embedded data directory into PostgreSQL, the check,
// a second run refused without --resume, and --resume adding nothing.
func TestCopyCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := embedded.Open(ctx, embedded.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"a", "b"} {
		if _, err := st.Submit(ctx, norn.NewTask{Queue: q, Spec: json.RawMessage(`{"x":1}`)}, norn.NewTask{Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	st.Close()
	c := pgtest.NewCluster(t)
	from, to := "embedded:"+dir, c.URL()
	out, err := runCopy(t, "--from", from, "--to", to)
	if err != nil || !strings.Contains(out, "copied 4 tasks") || !strings.Contains(out, "same checksum") {
		t.Fatalf("copy: %v\n%s", err, out)
	}
	if _, err := runCopy(t, "--from", from, "--to", to); err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("a second copy into the same destination: %v", err)
	}
	out, err = runCopy(t, "-o", "json", "--from", from, "--to", to, "--resume")
	var rep storecopy.Report
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Tasks != 4 || rep.Imported != 0 || !rep.Check.Same {
		t.Fatalf("resume: %v\n%s", err, out)
	}
	if _, err := runCopy(t, "--from", from); err == nil || !strings.Contains(err.Error(), "--to") {
		t.Fatalf("without --to: %v", err)
	}
	// The way back: PostgreSQL into a new embedded data directory.
	out, err = runCopy(t, "--from", to, "--to", "embedded:"+t.TempDir())
	if err != nil || !strings.Contains(out, "copied 4 tasks") || !strings.Contains(out, "same checksum") {
		t.Fatalf("into an embedded store: %v\n%s", err, out)
	}
}
