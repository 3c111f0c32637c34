package dashboard

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func get(t *testing.T, h http.Handler, method, path string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestHandlerServesIndexAndAssets(t *testing.T) {
	t.Parallel()
	h := Handler()
	tests := []struct {
		path, wantType string
		wantStatus     int
	}{
		{"/", "text/html; charset=utf-8", 200},
		{"/index.html", "text/html; charset=utf-8", 200},
		{"/assets/app.css", "text/css; charset=utf-8", 200},
		{"/assets/js/app.js", "text/javascript; charset=utf-8", 200},
		{"/assets/favicon.svg", "image/svg+xml", 200},
		{"/assets/nope.js", "", 404},
		{"/queues/x", "", 404},
		{"/dashboard.go", "", 404},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			w := get(t, h, "GET", tc.path, nil)
			if w.Code != tc.wantStatus {
				t.Fatalf("GET %s = %d, want %d", tc.path, w.Code, tc.wantStatus)
			}
			if w.Header().Get("Content-Security-Policy") != ContentSecurityPolicy {
				t.Errorf("GET %s: CSP header = %q", tc.path, w.Header().Get("Content-Security-Policy"))
			}
			if w.Header().Get("X-Content-Type-Options") != "nosniff" || w.Header().Get("Referrer-Policy") != "no-referrer" {
				t.Errorf("GET %s: missing nosniff/referrer headers: %v", tc.path, w.Header())
			}
			if tc.wantStatus == 200 {
				if got := w.Header().Get("Content-Type"); got != tc.wantType {
					t.Errorf("GET %s: Content-Type = %q, want %q", tc.path, got, tc.wantType)
				}
				if w.Body.Len() == 0 {
					t.Errorf("GET %s: empty body", tc.path)
				}
			}
		})
	}
}

func TestHandlerMethodsAndCaching(t *testing.T) {
	t.Parallel()
	h := Handler()
	if w := get(t, h, "POST", "/", nil); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST / = %d (Allow %q), want 405", w.Code, w.Header().Get("Allow"))
	}
	w := get(t, h, "HEAD", "/assets/app.css", nil)
	if w.Code != 200 || w.Body.Len() != 0 {
		t.Fatalf("HEAD = %d with %d bytes", w.Code, w.Body.Len())
	}
	etag := w.Header().Get("ETag")
	if etag == "" || w.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("missing ETag/Cache-Control: %v", w.Header())
	}
	if w := get(t, h, "GET", "/assets/app.css", map[string]string{"If-None-Match": etag}); w.Code != http.StatusNotModified {
		t.Fatalf("conditional GET = %d, want 304", w.Code)
	}
	if w := get(t, h, "GET", "/assets/app.css", map[string]string{"If-None-Match": `"other"`}); w.Code != 200 {
		t.Fatalf("GET with stale ETag = %d, want 200", w.Code)
	}
}

func TestCSPIsStrict(t *testing.T) {
	t.Parallel()
	for _, want := range []string{"default-src 'self'", "connect-src 'self'", "img-src 'self' data:", "frame-ancestors 'none'", "script-src 'self'", "style-src 'self'"} {
		if !strings.Contains(ContentSecurityPolicy, want) {
			t.Errorf("CSP lacks %q", want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "*", "http:", "https:"} {
		if strings.Contains(ContentSecurityPolicy, bad) {
			t.Errorf("CSP allows %q", bad)
		}
	}
}

// TestAssetsFollowTheRules keeps the front end honest: every file the page
// references exists, nothing is loaded from another origin, there is no
// inline script or style (the CSP would block it), and no code assigns HTML
// strings (API data must go in as text).
func TestAssetsFollowTheRules(t *testing.T) {
	t.Parallel()
	h := Handler()
	index, _ := fs.ReadFile(files, "index.html")
	refs := regexp.MustCompile(`(?:src|href)="([^"#][^"]*)"`).FindAllStringSubmatch(string(index), -1)
	if len(refs) < 3 {
		t.Fatalf("index.html references only %d files", len(refs))
	}
	for _, m := range refs {
		if w := get(t, h, "GET", "/"+m[1], nil); w.Code != 200 {
			t.Errorf("index.html references %s, which is %d", m[1], w.Code)
		}
	}
	for _, tag := range regexp.MustCompile(`<script[^>]*>`).FindAllString(string(index), -1) {
		if !strings.Contains(tag, " src=") {
			t.Errorf("index.html has an inline script: %s", tag)
		}
	}
	if strings.Contains(string(index), "style=") || strings.Contains(string(index), "<style") {
		t.Error("index.html has inline style")
	}
	imports := regexp.MustCompile(`from "\./([a-z]+\.js)"`)
	err := fs.WalkDir(files, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, _ := fs.ReadFile(files, p)
		s := string(b)
		for _, bad := range []string{"http://", "https://", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute(\"style\""} {
			if strings.Contains(s, bad) && !(bad == "http://" && strings.HasSuffix(p, ".svg") && strings.Contains(s, "http://www.w3.org/2000/svg")) {
				t.Errorf("%s contains %q", p, bad)
			}
		}
		for _, m := range imports.FindAllStringSubmatch(s, -1) {
			if _, err := fs.Stat(files, "assets/js/"+m[1]); err != nil {
				t.Errorf("%s imports missing module %s", p, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDefaultRetryMatchesTheServer: the queue page shows and edits the
// default retry policy from a copy in queue.js, which must say what
// norn.DefaultRetry does.
func TestDefaultRetryMatchesTheServer(t *testing.T) {
	t.Parallel()
	js, err := fs.ReadFile(files, "assets/js/queue.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`const DEFAULT_RETRY = \{ max_retries: (\d+), base: "([^"]+)", max: "([^"]+)", jitter: "([^"]+)" \};`).FindSubmatch(js)
	if m == nil {
		t.Fatal("queue.js has no DEFAULT_RETRY")
	}
	base, err1 := time.ParseDuration(string(m[2]))
	max, err2 := time.ParseDuration(string(m[3]))
	d := norn.DefaultRetry
	if string(m[1]) != strconv.Itoa(d.MaxRetries) || err1 != nil || base != d.Base.D() || err2 != nil || max != d.Max.D() || string(m[4]) != d.Jitter {
		t.Fatalf("queue.js's DEFAULT_RETRY %q does not match norn.DefaultRetry %+v", m[0], d)
	}
}
