package server

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/nornq/norn"
)

// lateClaimStore reproduces, deterministically, a long poll whose task
// arrives just as the caller hangs up: its Claim waits until the request's
// context is cancelled and only then claims (the first call only).
type lateClaimStore struct {
	norn.Store
	waiting chan struct{}
	once    sync.Once
}

func (s *lateClaimStore) Claim(ctx context.Context, req norn.ClaimRequest) ([]*norn.Task, error) {
	first := false
	s.once.Do(func() { first = true; close(s.waiting) })
	if !first {
		return s.Store.Claim(ctx, req)
	}
	<-ctx.Done()
	req.Wait = 0
	return s.Store.Claim(context.WithoutCancel(ctx), req)
}

func TestClaimForACallerThatHungUpGivesTheTasksBack(t *testing.T) {
	late := &lateClaimStore{waiting: make(chan struct{})}
	e := startServer(t, func(c *Config) { late.Store = c.Store; c.Store = late })
	e.must(201, "POST", "/v1/tasks", `{"id":"t1","queue":"lp"}`)

	ctx, hangUp := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", e.base+"/v1/queues/lp/claim", strings.NewReader(`{"worker":"w","wait":"60s"}`))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-late.waiting
	hangUp()
	<-done

	// The claim ran after the hang-up; the task must be ready again, its
	// attempt not counted, rather than running until its lease times out.
	waitFor(t, func() bool {
		task, err := e.store.Get(context.Background(), "t1")
		return err == nil && task.Status == norn.StatusReady && task.Lease == 1
	})
	task, err := e.store.Get(context.Background(), "t1")
	if err != nil {
		t.Fatal(err)
	}
	if task.Attempts != 0 {
		t.Fatalf("attempts %d after a claim nobody received, want 0", task.Attempts)
	}
	if got := e.claimOne("lp", "w2"); got.ID != "t1" {
		t.Fatalf("claimed %q", got.ID)
	}
}
