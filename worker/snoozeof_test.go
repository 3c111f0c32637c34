package worker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// TestSnoozeErrorsAskForTheirSnooze: each constructor's error asks the
// store for the snooze it names.
func TestSnoozeErrorsAskForTheirSnooze(t *testing.T) {
	at := time.Date(2031, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	past := time.Unix(1, 0).UTC()
	for _, c := range []struct {
		name string
		err  error
		want norn.Snooze
	}{
		{"Snooze", Snooze(time.Minute), norn.Snooze{Delay: norn.Duration(time.Minute)}},
		{"SnoozeNow", Snooze(0), norn.Snooze{RunAt: past}},
		{"SnoozeUntil", SnoozeUntil(at), norn.Snooze{RunAt: at.UTC()}},
		{"SnoozeUntilZero", SnoozeUntil(time.Time{}), norn.Snooze{RunAt: past}},
		{"SnoozeKey", SnoozeKey(time.Minute), norn.Snooze{Delay: norn.Duration(time.Minute), Scope: norn.SnoozeScopeKey}},
		{"SnoozeKeyUntil", SnoozeKeyUntil(at), norn.Snooze{RunAt: at.UTC(), Scope: norn.SnoozeScopeKey}},
		{"SnoozeKeyUntilZero", SnoozeKeyUntil(time.Time{}), norn.Snooze{RunAt: past, Scope: norn.SnoozeScopeKey}},
		{"Wrapped", fmt.Errorf("busy: %w", SnoozeKey(time.Second)), norn.Snooze{Delay: norn.Duration(time.Second), Scope: norn.SnoozeScopeKey}},
	} {
		got, ok := snoozeOf(c.err)
		if !ok || got != c.want {
			t.Errorf("%s: snooze %+v (%v), want %+v", c.name, got, ok, c.want)
		}
	}
	if _, ok := snoozeOf(errors.New("plain failure")); ok {
		t.Error("a plain error asked for a snooze")
	}
}
