package e2e

import (
	"context"
	"net/http"
	"testing"
)

// TestMaxEventStreamsFlag: --max-event-streams bounds the event streams a
// `norn server` keeps open at once; one past it is refused with 429.
func TestMaxEventStreamsFlag(t *testing.T) {
	s := startServer(t, t.TempDir(), "--max-event-streams", "2")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func() int {
		req, err := http.NewRequestWithContext(ctx, "GET", s.url+"/v1/events", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
		}
		return resp.StatusCode
	}
	for i := range 2 {
		if code := open(); code != http.StatusOK {
			t.Fatalf("stream %d: %d, want 200", i+1, code)
		}
	}
	if code := open(); code != http.StatusTooManyRequests {
		t.Fatalf("a third stream with --max-event-streams 2: %d, want 429", code)
	}
}
