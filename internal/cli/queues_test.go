package cli

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/nornq/norn"
	"github.com/spf13/pflag"
)

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"100/s", 100, true},
		{"100", 100, true},
		{"30/m", 0.5, true},
		{"36/h", 0.01, true},
		{"0", 0, true},
		{"off", 0, true},
		{"fast", 0, false},
		{"10/d", 0, false},
		{"-1/s", 0, false},
		{"", 0, false},
	} {
		got, err := parseRate(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("parseRate(%q) = %v, %v; want %v (ok %v)", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestParseKeyRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		key  string
		want norn.RateLimit
		ok   bool
	}{
		{"acme=50/s", "acme", norn.RateLimit{PerSecond: 50}, true},
		{"acme=30/m:5", "acme", norn.RateLimit{PerSecond: 0.5, Burst: 5}, true},
		{"a=b=2", "a", norn.RateLimit{}, false}, // the key ends at the first =
		{"acme=off", "acme", norn.RateLimit{}, true},
		{"acme=0", "acme", norn.RateLimit{}, true},
		{"acme=off:5", "", norn.RateLimit{}, false}, // a burst without a rate
		{"acme=10/s:-1", "", norn.RateLimit{}, false},
		{"acme=10/s:x", "", norn.RateLimit{}, false},
		{"acme", "", norn.RateLimit{}, false},
		{"=10/s", "", norn.RateLimit{}, false},
		{"acme=", "", norn.RateLimit{}, false},
		{"acme=fast", "", norn.RateLimit{}, false},
	} {
		k, got, err := parseKeyRate(c.in)
		if (err == nil) != c.ok || (c.ok && (k != c.key || got != c.want)) {
			t.Errorf("parseKeyRate(%q) = %q, %+v, %v; want %q, %+v (ok %v)", c.in, k, got, err, c.key, c.want, c.ok)
		}
	}
}

// TestQueueSetKeyRates: the key rate flags give the queue update, and
// bad combinations are usage errors naming the flag.
func TestQueueSetKeyRates(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want norn.QueueUpdate
		err  string
	}{
		{"queue default", []string{"--key-rate-limit", "5/s", "--key-burst", "10"},
			norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 5, Burst: 10}}, ""},
		{"removed", []string{"--key-rate-limit", "off"}, norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{}}, ""},
		{"a key's own with its limit", []string{"--key-rate", "acme=50/s:100", "--key", "acme=2"},
			norn.QueueUpdate{Keys: map[string]*norn.KeySettings{"acme": {Limit: 2, RateLimit: norn.RateLimit{PerSecond: 50, Burst: 100}}}}, ""},
		{"burst alone", []string{"--key-burst", "3"}, norn.QueueUpdate{}, "--key-burst needs --key-rate-limit"},
		{"bad rate", []string{"--key-rate-limit", "fast"}, norn.QueueUpdate{}, "--key-rate-limit"},
		{"bad key rate", []string{"--key-rate", "acme"}, norn.QueueUpdate{}, "--key-rate"},
		{"negative burst", []string{"--key-rate-limit", "1/s", "--key-burst", "-1"}, norn.QueueUpdate{}, "key_rate_limit.burst"},
	} {
		t.Run(c.name, func(t *testing.T) {
			qf := &queueSetFlags{}
			fs := pflag.NewFlagSet("set", pflag.ContinueOnError)
			qf.add(fs)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			u, _, err := qf.update(fs)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("update %v: %v; want an error with %q", c.args, err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(u, c.want) {
				t.Fatalf("update %v = %+v, %v; want %+v", c.args, u, err, c.want)
			}
		})
	}
}

func TestDescribeQueueKeyRates(t *testing.T) {
	var b strings.Builder
	q := norn.QueueInfo{Name: "hooks", QueueFlow: norn.QueueFlow{KeyRateLimit: norn.RateLimit{PerSecond: 0.5, Burst: 2}},
		Keys: []norn.KeyInfo{{Key: "acme", KeySettings: norn.KeySettings{RateLimit: norn.RateLimit{PerSecond: 50, Burst: 100}}}}}
	if err := describeQueue(&b, q); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"key_rate_limit:", "0.5/s, burst 2", "key acme:", "rate 50/s, burst 100"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describeQueue lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := describeQueue(&b, norn.QueueInfo{Name: "plain"}); err != nil || !regexp.MustCompile(`key_rate_limit:\s+none`).MatchString(b.String()) {
		t.Errorf("describeQueue of a queue without key rates (%v):\n%s", err, b.String())
	}
}
