package oacheck

import (
	"net/http"
	"sync"
	"testing"
)

var (
	cacheMu sync.Mutex
	cache   = map[string]*Checker{}
)

// ForTest returns a handler wrapper (server.Config.WrapHandler) that fails
// t with every mismatch between the traffic and spec. Mismatches reported
// after t ended (a handler outliving its test) are dropped.
func ForTest(t testing.TB, spec []byte) func(http.Handler) http.Handler {
	t.Helper()
	cacheMu.Lock()
	c, ok := cache[string(spec)]
	if !ok {
		var err error
		if c, err = New(spec); err != nil {
			cacheMu.Unlock()
			t.Fatal(err)
		}
		cache[string(spec)] = c
	}
	cacheMu.Unlock()
	var mu sync.Mutex
	done := false
	// Registered before the server's own cleanup, so it runs after the
	// server stopped: mismatches of its last requests still fail t.
	t.Cleanup(func() {
		mu.Lock()
		done = true
		mu.Unlock()
	})
	report := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if !done {
			t.Errorf("the traffic does not match the OpenAPI document: %v", err)
		}
	}
	return func(next http.Handler) http.Handler { return c.Middleware(next, report) }
}
