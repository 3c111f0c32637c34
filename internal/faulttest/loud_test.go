package faulttest

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// A failed fault run prints thousands of lines of node output after its
// error messages, and a CI log that keeps only its tail loses the errors.
// loud records every failure message of the package's tests so TestMain
// repeats them, in order, as the very last lines the test binary prints.
type loud struct {
	testing.TB
}

var failures struct {
	sync.Mutex
	lines []string
}

func record(name, msg string) {
	failures.Lock()
	failures.lines = append(failures.lines, name+": "+msg)
	failures.Unlock()
}

// loudT wraps t so its Error/Errorf/Fatal/Fatalf messages are recorded.
func loudT(t testing.TB) loud { return loud{t} }

func (l loud) Error(args ...any) {
	l.TB.Helper()
	record(l.Name(), fmt.Sprint(args...))
	l.TB.Error(args...)
}

func (l loud) Errorf(format string, args ...any) {
	l.TB.Helper()
	record(l.Name(), fmt.Sprintf(format, args...))
	l.TB.Errorf(format, args...)
}

func (l loud) Fatal(args ...any) {
	l.TB.Helper()
	record(l.Name(), fmt.Sprint(args...))
	l.TB.Fatal(args...)
}

func (l loud) Fatalf(format string, args ...any) {
	l.TB.Helper()
	record(l.Name(), fmt.Sprintf(format, args...))
	l.TB.Fatalf(format, args...)
}

// repeatFailures prints the recorded messages; TestMain calls it last.
func repeatFailures() {
	failures.Lock()
	defer failures.Unlock()
	if len(failures.lines) == 0 {
		return
	}
	fmt.Fprintf(os.Stdout, "faulttest: %d failure message(s), repeated after all output:\n", len(failures.lines))
	for _, l := range failures.lines {
		fmt.Fprintf(os.Stdout, "  %s\n", l)
	}
}
