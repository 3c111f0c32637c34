package norn

import (
	"errors"
	"testing"
	"time"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	l, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("no zone data for %s: %v", name, err)
	}
	return l
}

func TestCronNext(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	tests := []struct {
		name  string
		expr  string
		tz    string
		after string
		want  []string // successive ticks, RFC3339 UTC
	}{
		{"FiveFieldsEveryMinute", "* * * * *", "", "2026-01-01T00:00:30Z",
			[]string{"2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"}},
		{"SixFieldsWithSeconds", "*/20 * * * * *", "", "2026-01-01T00:00:05Z",
			[]string{"2026-01-01T00:00:20Z", "2026-01-01T00:00:40Z", "2026-01-01T00:01:00Z"}},
		{"Hourly", "@hourly", "", "2026-01-01T10:15:00Z",
			[]string{"2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z"}},
		{"DailyInZone", "@daily", "Europe/Berlin", "2026-01-01T12:00:00Z",
			[]string{"2026-01-01T23:00:00Z", "2026-01-02T23:00:00Z"}},
		{"EveryIsRealTime", "@every 30s", "America/New_York", "2026-03-08T06:59:45Z",
			[]string{"2026-03-08T07:00:15Z", "2026-03-08T07:00:45Z"}},
		{"Feb29OnlyInLeapYears", "0 0 29 2 *", "", "2026-03-01T00:00:00Z",
			[]string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"Day31SkipsShortMonths", "0 12 31 * *", "", "2026-03-31T12:00:00Z",
			[]string{"2026-05-31T12:00:00Z", "2026-07-31T12:00:00Z", "2026-08-31T12:00:00Z"}},
		{"MonthEndsAcrossYear", "0 0 1 * *", "", "2026-12-15T00:00:00Z",
			[]string{"2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z"}},
		// New York springs forward on 2026-03-08 at 02:00 EST (07:00Z) to 03:00 EDT.
		{"SkippedHourFiresOnceAtTheJump", "30 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"QuarterHoursInSkippedHourFireOnce", "*/15 * * * *", "America/New_York", "2026-03-08T06:40:00Z",
			[]string{"2026-03-08T06:45:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:15:00Z"}},
		// ... and falls back on 2026-11-01 at 02:00 EDT (06:00Z) to 01:00 EST.
		{"RepeatedHourFiresOnce", "30 1 * * *", "America/New_York", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"HourlyAcrossFallBack", "0 * * * *", "America/New_York", "2026-11-01T04:30:00Z",
			[]string{"2026-11-01T05:00:00Z", "2026-11-01T07:00:00Z", "2026-11-01T08:00:00Z"}},
		{"AfterInsideSecondPassOfRepeatedHour", "*/30 * * * *", "America/New_York", "2026-11-01T06:10:00Z",
			[]string{"2026-11-01T07:00:00Z"}},
		// Europe/Berlin: 2026-03-29 02:00 CET → 03:00 CEST (01:00Z).
		{"BerlinSkippedHour", "15 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z",
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:15:00Z"}},
		{"WeekdaysOnly", "0 9 * * MON-FRI", "", "2026-11-20T10:00:00Z", // a Friday
			[]string{"2026-11-23T09:00:00Z", "2026-11-24T09:00:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.tz != "" {
				mustZone(t, tt.tz)
			}
			c, err := ParseCron("cron", tt.expr, tt.tz)
			if err != nil {
				t.Fatal(err)
			}
			at := utc(tt.after)
			for i, w := range tt.want {
				got := c.Next(at)
				if !got.Equal(utc(w)) {
					t.Fatalf("tick %d after %s: got %s, want %s", i, at.UTC().Format(time.RFC3339), got.UTC().Format(time.RFC3339), w)
				}
				at = got
			}
		})
	}
}

func TestParseCronRejects(t *testing.T) {
	tests := []struct {
		name, expr, tz, field string
	}{
		{"Empty", "", "", "cron"},
		{"Garbage", "every tuesday", "", "cron"},
		{"TooManyFields", "* * * * * * *", "", "cron"},
		{"OutOfRange", "61 * * * *", "", "cron"},
		{"NeverFires", "0 0 30 2 *", "", "cron"},
		{"ZoneInExpression", "CRON_TZ=UTC * * * * *", "", "cron"},
		{"SubSecondEvery", "@every 100ms", "", "cron"},
		{"UnknownZone", "* * * * *", "Mars/Olympus", "timezone"},
		{"LocalZone", "* * * * *", "Local", "timezone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCron("cron", tt.expr, tt.tz)
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalidArgument || e.Field != tt.field {
				t.Fatalf("got %v, want invalid_argument on %s", err, tt.field)
			}
		})
	}
}

func FuzzParseCron(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/5 1-3 * * MON", "@every 1h", "0 0 29 2 *", "@daily", "1 2 3 4 5 6"} {
		f.Add(s)
	}
	from := time.Date(2026, 3, 8, 6, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, expr string) {
		c, err := ParseCron("cron", expr, "America/New_York")
		if err != nil {
			return
		}
		prev := from
		for i := 0; i < 5; i++ {
			n := c.Next(prev)
			if n.IsZero() {
				return
			}
			if !n.After(prev) {
				t.Fatalf("%q: tick %s not after %s", expr, n, prev)
			}
			prev = n
		}
	})
}
