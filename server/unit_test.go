package server

import (
	"bytes"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

func TestLoadTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "# comment\n\nsecret-a client\nsecret-b\tworker emails,sms\nsecret-c admin\n")
	toks, err := LoadTokens(good)
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 3 || toks[1].Role != RoleWorker || len(toks[1].Queues) != 2 || toks[1].Queues[1] != "sms" {
		t.Errorf("parsed wrongly: %+v", toks)
	}
	for name, text := range map[string]string{
		"badrole":   "tok boss\n",
		"short":     "tok\n",
		"long":      "tok client a b\n",
		"badqueue":  "tok client a,b c\n",
		"dup":       "tok client\ntok admin\n",
		"emptyqueu": "tok client a,,b\n",
	} {
		if _, err := LoadTokens(write(name, text)); err == nil {
			t.Errorf("%s: accepted %q", name, text)
		} else if !strings.Contains(err.Error(), ":1:") && !strings.Contains(err.Error(), ":2:") {
			t.Errorf("%s: error does not name the line: %v", name, err)
		}
	}
	if _, err := LoadTokens(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	a := newAuthenticator([]Token{{Token: "c", Role: RoleClient}, {Token: "w", Role: RoleWorker, Queues: []string{"q"}}})
	cases := []struct {
		header string
		ok     bool
		role   Role
	}{
		{"", false, ""},
		{"Bearer", false, ""},
		{"Bearer ", false, ""},
		{"Basic c", false, ""},
		{"Bearer nope", false, ""},
		{"Bearer c", true, RoleClient},
		{"bearer w", true, RoleWorker},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "/v1/stats", nil)
		if c.header != "" {
			r.Header.Set("Authorization", c.header)
		}
		p, err := a.authenticate(r)
		if c.ok != (err == nil) || (c.ok && p.role != c.role) {
			t.Errorf("%q: got %v %v", c.header, p, err)
		}
		if err != nil && norn.CodeOf(err) != norn.CodeUnauthenticated {
			t.Errorf("%q: code %s", c.header, norn.CodeOf(err))
		}
	}
	p := &principal{role: RoleWorker, queues: []string{"q"}}
	if p.checkQueue("q") != nil || norn.CodeOf(p.checkQueue("r")) != norn.CodePermissionDenied {
		t.Error("queue scope not enforced")
	}
	if qs, err := p.scopeQueues(nil); err != nil || len(qs) != 1 || qs[0] != "q" {
		t.Errorf("scopeQueues(nil) = %v %v", qs, err)
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "localhost:1": true, "[::1]:80": true, "127.3.2.1:0": true,
		":7070": false, "0.0.0.0:7070": false, "10.0.0.1:80": false, "example.com:80": false, "garbage": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// FuzzDecodeLeaseOps covers the lease batch decoder and op validation.
func FuzzDecodeLeaseOps(f *testing.F) {
	for _, s := range []string{`{"ops":[{"op":"heartbeat","id":"t","worker":"w","lease":1,"progress":0.5}]}`,
		`{"ops":[{"op":"fail","id":"t","worker":"w","lease":1,"error":{"code":"x"}}]}`, `{"ops":[{"progress":"x"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := wire.DecodeBatch(bytes.NewReader(b), "ops", 5, func(i int, op *norn.LeaseOp) error { return validateLeaseOp(op) })
		if err != nil && norn.CodeOf(err) == norn.CodeInternal {
			t.Fatalf("untyped error: %v", err)
		}
	})
}

// TestCheckBatchMatchesValidateBatch: the server's batch-wide check gives
// exactly norn.ValidateBatch's error for batches of individually valid tasks.
func TestCheckBatchMatchesValidateBatch(t *testing.T) {
	t.Parallel()
	for _, tasks := range [][]norn.NewTask{
		nil,
		{{Queue: "q"}, {Queue: "q"}},
		{{ID: "a", Queue: "q"}, {Queue: "q"}, {ID: "b", Queue: "q"}, {ID: "a", Queue: "q"}},
		{{ID: "a", Queue: "q"}, {ID: "a", Queue: "q"}, {ID: "a", Queue: "q"}},
		make([]norn.NewTask, norn.MaxBatch+1),
	} {
		for i := range tasks {
			if tasks[i].Queue == "" {
				tasks[i].Queue = "q"
			}
		}
		want := norn.ValidateBatch("tasks", tasks)
		got := checkBatch("tasks", tasks)
		if fmt.Sprint(got) != fmt.Sprint(want) || norn.CodeOf(got) != norn.CodeOf(want) {
			t.Errorf("%d tasks: checkBatch = %v, ValidateBatch = %v", len(tasks), got, want)
		}
	}
}

// countingReader counts what the server read, to prove a limit stopped
// reading early.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestRoutesMatchProtocol: the server serves exactly the routes of the
// protocol package, whose round-trip test covers each.
func TestRoutesMatchProtocol(t *testing.T) {
	t.Parallel()
	s := &Server{}
	var got []string
	for _, rt := range s.apiRoutes() {
		got = append(got, rt.pattern)
	}
	if strings.Join(got, "\n") != strings.Join(wire.Routes, "\n") {
		t.Errorf("server routes:\n%s\nprotocol routes:\n%s", strings.Join(got, "\n"), strings.Join(wire.Routes, "\n"))
	}
}
