package e2e

import (
	"strings"
	"testing"
)

// TestSignalCommand: norn signal sends signals and lists them, against a
// real server process through the OpenAPI-checking proxy.
func TestSignalCommand(t *testing.T) {
	t.Parallel()
	s := startServer(t, t.TempDir())
	s.ok(t, "submit", "pay", `{}`, "--id", "p1")
	mustContain(t, "signal", s.ok(t, "signal", "p1", "approval", `{"by":"ada"}`), `signal 1 "approval" sent to p1`)
	s.ok(t, "signal", "p1", "note")
	type signal struct {
		Seq  int
		Name string
		Data map[string]string
	}
	got := decode[[]signal](t, s.ok(t, "signal", "p1", "--list", "-o", "json"))
	if len(got) != 2 || got[0].Name != "approval" || got[0].Data["by"] != "ada" || got[1].Seq != 2 {
		t.Fatalf("signals: %+v", got)
	}
	if got := decode[[]signal](t, s.ok(t, "signal", "p1", "--list", "--after", "1", "-o", "json")); len(got) != 1 || got[0].Name != "note" {
		t.Fatalf("signals after 1: %+v", got)
	}
	mustContain(t, "table", s.ok(t, "signal", "p1", "--list"), "approval", `{"by":"ada"}`)
	s.fails(t, 2, "DATA must be JSON", "signal", "p1", "approval", "yes")
	s.fails(t, 2, "give the task's id", "signal", "p1")
	s.fails(t, 1, "not found", "signal", "nope", "approval")
	s.ok(t, "cancel", "p1")
	if r := s.norn(t, "", "signal", "p1", "late"); r.code != 1 || !strings.Contains(r.err, "ended") && !strings.Contains(r.err, "cancelled") {
		t.Fatalf("signal to a cancelled task: %+v", r)
	}
}
