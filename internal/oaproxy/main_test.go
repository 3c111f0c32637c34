package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"
)

// TestProxyReportsMismatchesAndPassesAnswersThrough runs the proxy in
// front of a fake upstream: the answers reach the client unchanged, the one
// breaking the document is reported, and an upstream that is gone drops
// the client's connection rather than answering a status of the proxy's.
func TestProxyReportsMismatchesAndPassesAnswersThrough(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/whoami":
			_, _ = io.WriteString(w, `{"role":"admin","auth":false}`)
		default:
			_, _ = io.WriteString(w, `{"task":{"id":1}}`)
		}
	}))
	target, _ := url.Parse(up.URL)
	var mu sync.Mutex
	var reports []string
	h, err := handler(target, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, err.Error())
	})
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(h)
	defer proxy.Close()

	get := func(path string) (int, string, error) {
		resp, err := http.Get(proxy.URL + path)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	if status, body, err := get("/v1/whoami"); err != nil || status != 200 || body != `{"role":"admin","auth":false}` {
		t.Fatalf("whoami: %d %q %v", status, body, err)
	}
	if status, body, err := get("/v1/tasks/a"); err != nil || status != 200 || body != `{"task":{"id":1}}` {
		t.Fatalf("task: %d %q %v", status, body, err)
	}
	// The check runs once the upstream's answer is through, which may be
	// after the client has read it.
	await.Until(t, 10*time.Second, "the mismatch to be reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(reports) > 0
	})
	mu.Lock()
	if len(reports) != 1 || !strings.Contains(reports[0], "GET /v1/tasks/a") {
		t.Errorf("reports: %q", reports)
	}
	mu.Unlock()

	up.Close()
	if status, body, err := get("/v1/whoami"); err == nil {
		t.Errorf("upstream gone: the proxy answered %d %q", status, body)
	}
}
