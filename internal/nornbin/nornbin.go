// Package nornbin builds the norn command for tests that run real
// `norn server` processes (the fault suite, the cluster tests, the CLI's
// end-to-end tests): once per test binary, and without -race, since the
// processes are the system under test and the race detector watches the
// test itself.
package nornbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var (
	once sync.Once
	dir  string
	path string
	err  error
)

// Build builds cmd/norn the first time it is called and returns the
// binary's path (the same path, or error, on every later call).
func Build() (string, error) {
	once.Do(func() {
		if dir, err = os.MkdirTemp("", "norn-bin-"); err != nil {
			return
		}
		path = filepath.Join(dir, "norn")
		out, berr := exec.Command("go", "build", "-o", path, "github.com/nornq/norn/cmd/norn").CombinedOutput()
		if berr != nil {
			err = fmt.Errorf("go build ./cmd/norn: %v\n%s", berr, out)
		}
	})
	return path, err
}

// Path is Build for a test: it fails t when the binary cannot be built.
func Path(t testing.TB) string {
	t.Helper()
	p, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Remove deletes the binary; TestMain calls it after the tests ran.
func Remove() {
	if dir != "" {
		_ = os.RemoveAll(dir)
	}
}
