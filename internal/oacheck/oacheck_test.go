package oacheck_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nornq/norn/internal/oacheck"
	"github.com/nornq/norn/server"
)

// TestMiddlewareReportsMismatches drives the middleware with handlers
// that break the document in each way it checks, and with ones that keep
// it, so the check of the real traffic is known to be able to fail.
func TestMiddlewareReportsMismatches(t *testing.T) {
	c, err := oacheck.New(server.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	answer := func(status int, body string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		})
	}
	const whoami = `{"role":"admin","auth":false}`
	for _, tc := range []struct {
		name         string
		method, path string
		body         string
		h            http.Handler
		mismatch     bool
	}{
		{"a documented answer", "GET", "/v1/whoami", "", answer(200, whoami), false},
		{"an undocumented status", "GET", "/v1/whoami", "", answer(418, `{"error":{"code":"x","message":"m"}}`), true},
		{"a body off its schema", "GET", "/v1/tasks/a", "", answer(200, `{"task":{"id":1}}`), true},
		{"a refused request answered 200", "POST", "/v1/tasks", `{"queue":"q","delay":"5 minutes"}`, answer(201, `{}`), true},
		{"a refused request answered 400", "POST", "/v1/tasks", `{"queue":"q","delay":"5 minutes"}`,
			answer(400, `{"error":{"code":"invalid_argument","message":"m","field":"delay"}}`), false},
		{"a body where none is documented", "GET", "/v1/stats", `{}`, answer(200, `{}`), true},
		{"an undocumented path", "GET", "/somewhere", "", answer(418, "x"), false},
		{"an undocumented method served", "PUT", "/v1/stats", "", answer(200, `{}`), true},
		{"an undocumented method refused", "PUT", "/v1/stats", "", answer(405, `{"error":{"code":"invalid_argument","message":"m"}}`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []error
			h := c.Middleware(tc.h, func(err error) { got = append(got, err) })
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			h.ServeHTTP(httptest.NewRecorder(), req)
			if tc.mismatch && len(got) == 0 {
				t.Error("no mismatch reported")
			}
			if !tc.mismatch && len(got) > 0 {
				t.Errorf("reported %v", got)
			}
		})
	}
}
