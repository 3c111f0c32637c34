package wire

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func TestMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "abc-123", "a\"b", "<&>", "tab\there", "é", "\xff", "0193b2f4-7c1e-7000-8000-000000000000"} {
		want, _ := json.Marshal(s)
		if got := jsonString(nil, s); string(got) != string(want) {
			t.Errorf("String(%q) = %s, want %s", s, got, want)
		}
	}
	for _, f := range []float64{0, 1, 0.5, 1.0 / 3, 1e-7, 1e21, 123456789, -2.5e-9, math.SmallestNonzeroFloat64} {
		want, _ := json.Marshal(f)
		got, err := jsonFloat(nil, f)
		if err != nil || string(got) != string(want) {
			t.Errorf("Float(%v) = %s, %v; want %s", f, got, err, want)
		}
	}
	if _, err := jsonFloat(nil, math.NaN()); err == nil {
		t.Error("Float(NaN) must fail like json.Marshal")
	}
	for _, tm := range []time.Time{time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC), time.Unix(0, 0).UTC(), time.Date(2030, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))} {
		want, _ := json.Marshal(tm)
		got, err := jsonTime(nil, "", tm)
		if err != nil || string(got) != string(want) {
			t.Errorf("Time(%v) = %s, %v; want %s", tm, got, err, want)
		}
	}
	if _, err := jsonTime(nil, "", time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)); err == nil {
		t.Error("Time(year 10000) must fail like json.Marshal")
	}
	d := norn.Duration(90 * time.Second)
	want, _ := json.Marshal(d)
	if got := jsonDuration(nil, "", d); string(got) != string(want) {
		t.Errorf("Duration = %s, want %s", got, want)
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"x", "<", "\x00", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := jsonString(nil, s); string(got) != string(want) {
			t.Fatalf("String(%q) = %s, want %s", s, got, want)
		}
	})
}
