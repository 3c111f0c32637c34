package norn

import (
	"errors"
	"testing"
)

func TestFairByValidation(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	for _, c := range []struct {
		name  string
		u     QueueUpdate
		field string // "" = valid
	}{
		{"off", QueueUpdate{FairBy: str("")}, ""},
		{"concurrency key", QueueUpdate{FairBy: str("concurrency_key")}, ""},
		{"label", QueueUpdate{FairBy: str("label:tenant")}, ""},
		{"label without name", QueueUpdate{FairBy: str("label:")}, "fair_by"},
		{"label with colon", QueueUpdate{FairBy: str("label:a:b")}, "fair_by"},
		{"unknown", QueueUpdate{FairBy: str("tenant")}, "fair_by"},
		{"weight", QueueUpdate{Keys: map[string]*KeySettings{"a": {Weight: 5}}}, ""},
		{"negative weight", QueueUpdate{Keys: map[string]*KeySettings{"a": {Weight: -1}}}, `keys["a"].weight`},
		{"weight too big", QueueUpdate{Keys: map[string]*KeySettings{"a": {Weight: MaxKeyWeight + 1}}}, `keys["a"].weight`},
	} {
		err := c.u.Validate()
		var ne *Error
		if c.field == "" && err != nil || c.field != "" && (!errors.As(err, &ne) || ne.Field != c.field) {
			t.Errorf("%s: %v, want field %q", c.name, err, c.field)
		}
	}
}

func TestCheckFlowRefusesKeyLimitsOnLabelFairness(t *testing.T) {
	t.Parallel()
	str := func(s string) *string { return &s }
	one := 1
	label := QueueFlow{FairBy: "label:tenant"}
	for _, c := range []struct {
		name      string
		u         QueueUpdate
		after     QueueFlow
		keyLimits bool
		keyRates  bool
		field     string
	}{
		{"label alone", QueueUpdate{FairBy: str("label:tenant")}, label, false, false, ""},
		{"concurrency key with limits", QueueUpdate{FairBy: str("concurrency_key")},
			QueueFlow{FairBy: "concurrency_key", KeyLimit: 1}, true, false, ""},
		{"label onto key_limit", QueueUpdate{FairBy: str("label:tenant")}, QueueFlow{FairBy: "label:tenant", KeyLimit: 1}, false, false, "fair_by"},
		{"key_limit onto label", QueueUpdate{KeyLimit: &one}, QueueFlow{FairBy: "label:tenant", KeyLimit: 1}, false, false, "key_limit"},
		{"key's limit onto label", QueueUpdate{Keys: map[string]*KeySettings{"a": {Limit: 2}}}, label, true, false, `keys["a"].limit`},
		{"label onto a key's limit", QueueUpdate{FairBy: str("label:tenant")}, label, true, false, "fair_by"},
		{"max_running with label", QueueUpdate{FairBy: str("label:tenant")}, QueueFlow{FairBy: "label:tenant", MaxRunning: 3}, false, false, ""},
		{"key_rate_limit onto label", QueueUpdate{KeyRateLimit: &RateLimit{PerSecond: 1}},
			QueueFlow{FairBy: "label:tenant", KeyRateLimit: RateLimit{PerSecond: 1}}, false, false, "key_rate_limit"},
		{"label onto key_rate_limit", QueueUpdate{FairBy: str("label:tenant")},
			QueueFlow{FairBy: "label:tenant", KeyRateLimit: RateLimit{PerSecond: 1}}, false, false, "fair_by"},
		{"key's rate onto label", QueueUpdate{Keys: map[string]*KeySettings{"a": {RateLimit: RateLimit{PerSecond: 2}}}}, label, false, true,
			`keys["a"].rate_limit`},
		{"key rates with concurrency_key", QueueUpdate{FairBy: str("concurrency_key")},
			QueueFlow{FairBy: "concurrency_key", KeyRateLimit: RateLimit{PerSecond: 1}}, false, true, ""},
	} {
		err := c.u.CheckFlow(c.after, c.keyLimits, c.keyRates)
		var ne *Error
		if c.field == "" && err != nil || c.field != "" && (!errors.As(err, &ne) || ne.Field != c.field) {
			t.Errorf("%s: %v, want field %q", c.name, err, c.field)
		}
	}
}

func TestFairKey(t *testing.T) {
	t.Parallel()
	labels := map[string]string{"tenant": "acme"}
	for _, c := range []struct {
		fairBy, want string
	}{{"", ""}, {"concurrency_key", "ck"}, {"label:tenant", "acme"}, {"label:other", ""}} {
		if got := (QueueFlow{FairBy: c.fairBy}).FairKey("ck", labels); got != c.want {
			t.Errorf("fair_by %q: key %q, want %q", c.fairBy, got, c.want)
		}
	}
	if FairStride(0) != FairUnit || FairStride(3)*3 != FairUnit || FairStride(MaxKeyWeight) < 1 {
		t.Errorf("strides: %d %d %d", FairStride(0), FairStride(3), FairStride(MaxKeyWeight))
	}
}
