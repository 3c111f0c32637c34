package await

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeT records a failure instead of ending the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}

func run(f func(t *fakeT)) (failed string) {
	t := &fakeT{}
	defer func() {
		if r := recover(); r != nil && r != any(t) {
			panic(r)
		}
		failed = t.failed
	}()
	f(t)
	return ""
}

func TestUntil(t *testing.T) {
	n := 0
	if got := run(func(ft *fakeT) { Until(ft, time.Second, "three calls", func() bool { n++; return n == 3 }) }); got != "" || n != 3 {
		t.Fatalf("a condition that holds at the third call: failed %q after %d calls", got, n)
	}
	start := time.Now()
	if got := run(func(ft *fakeT) { Until(ft, 20*time.Millisecond, "never", func() bool { return false }) }); !strings.Contains(got, "waited") {
		t.Fatalf("a condition that never holds: failed %q", got)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Fatalf("gave up after %s, before the 20ms it was given", el)
	}
}

func TestCheck(t *testing.T) {
	if got := run(func(ft *fakeT) {
		Check(ft, time.Second, "an error", func() (string, error) { return "", errors.New("boom") })
	}); got == "" {
		t.Fatal("an error did not end the wait with a failure")
	}
	calls := 0
	if got := run(func(ft *fakeT) {
		Check(ft, time.Second, "two calls", func() (string, error) {
			calls++
			if calls < 2 {
				return "not yet", nil
			}
			return "", nil
		})
	}); got != "" || calls != 2 {
		t.Fatalf("failed %q after %d calls", got, calls)
	}
}
