package norn

import (
	"testing"
	"time"
)

func TestReservedID(t *testing.T) {
	for _, c := range []struct {
		id       string
		reserved bool
	}{
		{ScheduleTaskID("report", time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)), true},
		{"schedule:", true},
		{"norn:probe", true},
		{"norn.kafka-delay~order-42", true},
		{"q~~bYWJj", true},
		{"~home", false},
		{"a b~c", false},
		{"schedule-report", false},
		{"Schedule:x", false},
		{"order-42", false},
		{"0193b2f4-7c1e-7000-8000-000000000001", false},
	} {
		if got := ReservedID(c.id) != ""; got != c.reserved {
			t.Errorf("ReservedID(%q) reserved = %v, want %v", c.id, got, c.reserved)
		}
		err := ValidateCallerID("id", c.id)
		if c.reserved && CodeOf(err) != CodeInvalidArgument {
			t.Errorf("ValidateCallerID(%q) = %v, want refused", c.id, err)
		}
	}
}
