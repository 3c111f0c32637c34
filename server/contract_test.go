package server

import (
	"encoding/json"
	"math/big"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nornq/norn"
)

// TestDurationPatternMatchesTheParser feeds one table of strings to the
// Duration pattern of openapi.json and to norn.Duration's parser: a client
// that checks its input against the document must accept exactly what the
// server does.
func TestDurationPatternMatchesTheParser(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Pattern string `json:"pattern"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openapiDoc, &doc); err != nil {
		t.Fatal(err)
	}
	pattern := doc.Components.Schemas["Duration"].Pattern
	if pattern == "" {
		t.Fatal("Duration has no pattern")
	}
	re := regexp.MustCompile(pattern)
	for _, c := range []struct {
		in string
		// outOfRange: well formed, but larger than a duration holds; the
		// pattern says what is well formed, the description the range.
		outOfRange bool
	}{
		{in: "0"}, {in: "+0"}, {in: "-0"}, {in: "0s"}, {in: "-0s"}, {in: "-0.0h"}, {in: "-.0m"},
		{in: "10s"}, {in: "+10s"}, {in: "1h30m"}, {in: "1h30m15s"}, {in: "1.5s"}, {in: ".5s"}, {in: "1.s"},
		{in: "300ms"}, {in: "2us"}, {in: "2µs"}, {in: "2μs"}, {in: "7ns"}, {in: "1m1m"}, {in: "0001h"}, {in: "876000h"},
		{in: ""}, {in: "s"}, {in: "."}, {in: ".s"}, {in: "5"}, {in: "00"}, {in: "-1s"}, {in: "-0.1s"}, {in: "--1s"},
		{in: "+-1s"}, {in: "5 minutes"}, {in: "5m "}, {in: " 5m"}, {in: "5min"}, {in: "5sec"}, {in: "1d"}, {in: "1H"},
		{in: "1h30"}, {in: "1e3s"}, {in: "1,5s"}, {in: "1..5s"}, {in: "0x10s"}, {in: "P1D"}, {in: "1h-30m"}, {in: "ms"},
		{in: "9223372036854775808ns", outOfRange: true}, {in: "3000000h", outOfRange: true},
	} {
		var d norn.Duration
		parsed := d.UnmarshalJSON([]byte(strconv.Quote(c.in))) == nil
		matched := re.MatchString(c.in)
		if matched != (parsed || c.outOfRange) {
			t.Errorf("%q: pattern matches %v, the parser accepts %v", c.in, matched, parsed)
		}
		if c.outOfRange && parsed {
			t.Errorf("%q: the parser accepts a duration out of range", c.in)
		}
	}
}

// TestWrongMethodIs405 checks a known path asked with a method it does not
// serve answers 405 with Allow and the JSON error body, and an unknown path
// still 404.
func TestWrongMethodIs405(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.Dashboard = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	})
	for _, c := range []struct {
		method, path, allow string
	}{
		{"PUT", "/v1/tasks", "GET, HEAD, POST, DELETE"},
		{"POST", "/v1/tasks/a", "GET, HEAD, PATCH, DELETE"},
		{"GET", "/v1/tasks/a/cancel", "POST"},
		{"GET", "/v1/sweep", "POST"},
		{"DELETE", "/v1/queues/q", "GET, HEAD, PATCH"},
		{"POST", "/v1/openapi.json", "GET, HEAD"},
		{"POST", "/healthz", "GET, HEAD"},
		{"DELETE", "/readyz", "GET, HEAD"},
		{"PUT", "/metrics", "GET, HEAD"},
	} {
		r := e.do(c.method, c.path, "")
		if r.status != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.status, r.body)
			continue
		}
		if got := r.header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
		var body struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(r.body, &body); err != nil || body.Error.Code != string(norn.CodeInvalidArgument) || body.Error.Message == "" {
			t.Errorf("%s %s: body %s", c.method, c.path, r.body)
		}
	}
	e.must(http.StatusNotFound, "GET", "/v1/nothing-here", "")
	e.must(http.StatusNotFound, "POST", "/v1/tasks/a/nothing", "")
	e.must(http.StatusTeapot, "POST", "/dashboard-page", "")
}

// FuzzDurationPattern holds the pattern to the parser on any string: what
// the parser accepts the pattern matches, and what the pattern matches the
// parser accepts unless it is too large for a duration.
func FuzzDurationPattern(f *testing.F) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Pattern string `json:"pattern"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openapiDoc, &doc); err != nil {
		f.Fatal(err)
	}
	re := regexp.MustCompile(doc.Components.Schemas["Duration"].Pattern)
	for _, s := range []string{"0", "-0s", "1h30m", ".5µs", "1.s", "5 minutes", "1d", "9223372036854775807ns", "2562048h"} {
		f.Add(s)
	}
	component := regexp.MustCompile(`([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)`)
	unitNs := map[string]int64{"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9}
	f.Fuzz(func(t *testing.T, s string) {
		var d norn.Duration
		parsed := d.UnmarshalJSON([]byte(strconv.Quote(s))) == nil
		matched := re.MatchString(s)
		if parsed && !matched {
			t.Fatalf("%q: the parser accepts it, the pattern does not", s)
		}
		if matched && !parsed {
			// Only a value beyond what a duration holds may be refused.
			sum := new(big.Rat)
			for _, m := range component.FindAllStringSubmatch(s, -1) {
				num := m[1]
				if strings.HasPrefix(num, ".") {
					num = "0" + num
				}
				if strings.HasSuffix(num, ".") {
					num += "0"
				}
				v, ok := new(big.Rat).SetString(num)
				if !ok {
					t.Fatalf("%q: component %q", s, m[0])
				}
				sum.Add(sum, v.Mul(v, big.NewRat(unitNs[m[2]], 1)))
			}
			if sum.Cmp(new(big.Rat).SetInt64(1<<62)) < 0 {
				t.Fatalf("%q: the pattern matches it, the parser refuses it (%s ns)", s, sum.FloatString(0))
			}
		}
	})
}

// TestPreflightAllowsEveryMethodOfTheAPI checks a CORS preflight names
// every method a route of the API is served with: an allowed origin can
// make every call (PUT a schedule or a key's settings included).
func TestPreflightAllowsEveryMethodOfTheAPI(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) { c.CORSOrigins = []string{"https://app.example.com"} })
	r := e.must(204, "OPTIONS", "/v1/schedules/s", "", withHeader("Origin", "https://app.example.com"), withHeader("Access-Control-Request-Method", "PUT"))
	allowed := map[string]bool{}
	for _, m := range strings.Split(r.header.Get("Access-Control-Allow-Methods"), ",") {
		allowed[strings.TrimSpace(m)] = true
	}
	for _, rt := range (&Server{}).apiRoutes() {
		if m, _, _ := strings.Cut(rt.pattern, " "); !allowed[m] {
			t.Errorf("%s: the preflight does not allow %s (it allows %q)", rt.pattern, m, r.header.Get("Access-Control-Allow-Methods"))
		}
	}
}
