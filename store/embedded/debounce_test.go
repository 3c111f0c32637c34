package embedded

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nornq/norn"
)

// TestDebounceSurvivesReopen: a spec replaced in place and a unique key
// handed to a successor are on disk: after a reopen the holder keeps the
// new spec and the successor, not the running holder, holds the key.
func TestDebounceSurvivesReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, Options{Dir: dir, ManualSweep: true, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	rep := func(s *Store, key, spec string) norn.Submitted {
		t.Helper()
		res, err := s.Submit(ctx, norn.NewTask{Queue: "q", UniqueKey: key, OnDuplicate: norn.DuplicateReplace, Spec: json.RawMessage(spec)})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	if _, err := s.Submit(ctx, norn.NewTask{ID: "run", Queue: "q", UniqueKey: "r"}, norn.NewTask{ID: "wait", Queue: "q", UniqueKey: "w", Delay: norn.Duration(3600e9)}); err != nil {
		t.Fatal(err)
	}
	w, err := s.RegisterWorker(ctx, norn.WorkerInfo{Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Claim(ctx, norn.ClaimRequest{Worker: w, Queues: []string{"q"}, N: 1}); err != nil || len(got) != 1 {
		t.Fatalf("claim: %v %v", got, err)
	}
	succ := rep(s, "r", `{"s":1}`).Task.ID
	rep(s, "w", `{"w":2}`)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = reopen(t, dir)
	if g, err := s.Get(ctx, "wait"); err != nil || string(g.Spec) != `{"w":2}` {
		t.Fatalf("replaced spec after reopen: %v %v", g, err)
	}
	if g, err := s.Get(ctx, "run"); err != nil || g.UniqueKey != "" {
		t.Fatalf("running holder after reopen: %+v %v; want no key", g, err)
	}
	if got := rep(s, "r", `{"s":2}`); !got.Replaced || got.Task.ID != succ {
		t.Fatalf("replace after reopen: %+v, want the successor %s replaced", got, succ)
	}
}
