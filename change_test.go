package norn

import (
	"errors"
	"testing"
	"time"
)

// wantConflict fails unless err is nil when field is "-", or a conflict
// naming field otherwise.
func wantConflict(t *testing.T, err error, field string) {
	t.Helper()
	if field == "-" {
		if err != nil {
			t.Fatalf("got %v, want no error", err)
		}
		return
	}
	var ne *Error
	if !errors.As(err, &ne) || ne.Code != CodeConflict || ne.Field != field {
		t.Fatalf("got %v, want a conflict naming %q", err, field)
	}
}

func TestRequirementCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		r       Requirement
		exists  bool
		version uint64
		field   string // "-": holds
	}{
		{"exists, any version", Requirement{ID: "a"}, true, 7, "-"},
		{"exists at the version", Requirement{ID: "a", Version: 7}, true, 7, "-"},
		{"another version", Requirement{ID: "a", Version: 6}, true, 7, "version"},
		{"missing task", Requirement{ID: "a"}, false, 0, "id"},
		{"missing task with a version", Requirement{ID: "a", Version: 1}, false, 0, "id"},
	} {
		t.Run(c.name, func(t *testing.T) { wantConflict(t, c.r.Check(c.exists, c.version), c.field) })
	}
}

func TestCheckCancel(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s       Status
		already bool
		field   string // "-": no error; "": a conflict naming no field
	}{
		{StatusReady, false, "-"},
		{StatusScheduled, false, "-"},
		{StatusBlocked, false, "-"},
		{StatusRunning, false, "-"},
		{StatusCancelled, true, "-"},
		{StatusCompleted, false, ""},
		{StatusAborted, false, ""},
	} {
		t.Run(string(c.s), func(t *testing.T) {
			already, err := CheckCancel("x", c.s)
			if already != c.already {
				t.Fatalf("already = %v, want %v", already, c.already)
			}
			wantConflict(t, err, c.field)
		})
	}
}

func TestCancelEntry(t *testing.T) {
	t.Parallel()
	if h := CancelEntry(StatusRunning, "w", 3); h != (HistoryEntry{Type: TaskCancel, Worker: "w", Lease: 3}) {
		t.Fatalf("running: %+v", h)
	}
	// A ready task's owner and lease are those of an attempt that ended.
	if h := CancelEntry(StatusReady, "w", 3); h != (HistoryEntry{Type: TaskCancel}) {
		t.Fatalf("ready: %+v", h)
	}
}

func TestUpdateCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		u     Update
		s     Status
		field string // "-": allowed; "": a conflict naming no field
	}{
		{"ready", Update{}, StatusReady, "-"},
		{"scheduled", Update{}, StatusScheduled, "-"},
		{"blocked", Update{}, StatusBlocked, "-"},
		{"at the version", Update{IfVersion: 4}, StatusReady, "-"},
		{"another version", Update{IfVersion: 3}, StatusReady, "if_version"},
		{"the version is checked first", Update{IfVersion: 3}, StatusRunning, "if_version"},
		{"running", Update{}, StatusRunning, ""},
		{"completed", Update{}, StatusCompleted, ""},
		{"aborted", Update{}, StatusAborted, ""},
		{"cancelled", Update{}, StatusCancelled, ""},
	} {
		t.Run(c.name, func(t *testing.T) { wantConflict(t, c.u.Check("x", 4, c.s), c.field) })
	}
}

func TestMoveRunAt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	past, later := now.Add(-time.Hour), now.Add(time.Hour)
	for _, c := range []struct {
		name   string
		s      Status
		at     time.Time
		status Status
		runAt  time.Time
	}{
		{"scheduled to the past: ready, the time kept", StatusScheduled, past, StatusReady, past},
		{"scheduled to now: ready", StatusScheduled, now, StatusReady, now},
		{"scheduled to zero: ready now", StatusScheduled, time.Time{}, StatusReady, now},
		{"scheduled to later: still scheduled", StatusScheduled, later, StatusScheduled, later},
		{"ready to later: scheduled", StatusReady, later, StatusScheduled, later},
		{"ready to the past: still ready", StatusReady, past, StatusReady, past},
		{"blocked to later: still blocked", StatusBlocked, later, StatusBlocked, later},
		{"blocked to the past: still blocked", StatusBlocked, past, StatusBlocked, past},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, at := MoveRunAt(c.s, c.at, now)
			if s != c.status || !at.Equal(c.runAt) {
				t.Fatalf("MoveRunAt = %s at %v, want %s at %v", s, at, c.status, c.runAt)
			}
		})
	}
}
