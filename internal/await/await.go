// Package await is how tests wait: for a condition, never a fixed time.
package await

import (
	"testing"
	"time"
)

// poll is how often a condition is asked again: often enough that a test
// goes on within a few milliseconds of the condition holding, seldom
// enough not to load the machine the way a spinning loop would.
const poll = 5 * time.Millisecond

// Until calls cond until it returns true; if within passes first, it fails
// t, saying what it waited for.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s: it did not happen", within, what)
		}
		time.Sleep(poll)
	}
}

// Check is Until for a condition that says why it does not hold yet (""
// when it does) or fails (err, which ends the wait at once).
func Check(t testing.TB, within time.Duration, what string, cond func() (notYet string, err error)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		msg, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s: %s", within, what, msg)
		}
		time.Sleep(poll)
	}
}
