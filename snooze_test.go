package norn

import (
	"errors"
	"testing"
	"time"
)

func TestSnoozeValidate(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name  string
		s     Snooze
		field string // "" = valid
	}{
		{"delay", Snooze{Delay: Duration(time.Second)}, ""},
		{"run_at", Snooze{RunAt: at}, ""},
		{"neither", Snooze{}, "delay"},
		{"both", Snooze{Delay: Duration(time.Second), RunAt: at}, "run_at"},
		{"negative delay", Snooze{Delay: Duration(-time.Second)}, "delay"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.s.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var ne *Error
			if !errors.As(err, &ne) || ne.Code != CodeInvalidArgument || ne.Field != c.field {
				t.Fatalf("Validate = %v, want invalid_argument naming %q", err, c.field)
			}
		})
	}
}

func TestAfterSnooze(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name   string
		s      Snooze
		status Status
		runAt  time.Time
	}{
		{"delay", Snooze{Delay: Duration(30 * time.Second)}, StatusScheduled, now.Add(30 * time.Second)},
		{"future run_at", Snooze{RunAt: now.Add(time.Hour)}, StatusScheduled, now.Add(time.Hour)},
		{"past run_at is ready now", Snooze{RunAt: now.Add(-time.Hour)}, StatusReady, now},
		{"run_at now is ready now", Snooze{RunAt: now}, StatusReady, now},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := AfterSnooze(now, c.s)
			if o.Status != c.status || !o.RunAt.Equal(c.runAt) || o.History != TaskSnooze {
				t.Fatalf("AfterSnooze = %+v, want %s at %v", o, c.status, c.runAt)
			}
		})
	}
}
