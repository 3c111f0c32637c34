// Package dashboard serves Norn's web dashboard: a single-page application
// of hand-written HTML, CSS and JavaScript modules embedded in the binary, so
// `go build` needs no front-end toolchain and nothing is fetched from the
// internet at run time.
//
// The page talks to the HTTP API under /v1 of the same origin; the server
// mounts Handler at "/" next to it. Routing happens in the browser with hash
// routes (#/, #/queues/NAME, #/tasks/ID), so this handler only ever serves
// index.html and the files under /assets/.
package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed assets index.html
var files embed.FS

// ContentSecurityPolicy is sent with every response. Scripts, styles,
// connections and images may only come from the serving origin (plus data:
// images, which the canvas export would need); inline script and style are
// refused, so an injected string in a task spec or label cannot run, and
// the page cannot be framed (clickjacking on the cancel/delete buttons).
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; " +
	"connect-src 'self'; img-src 'self' data:; font-src 'self'; object-src 'none'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

type asset struct {
	body        []byte
	contentType string
	etag        string
}

// Handler returns the dashboard's HTTP handler. It answers GET and HEAD for
// "/" (and "/index.html") with the application page and "/assets/..." with
// its static files; any other path is 404 and any other method 405, so it
// can be mounted at "/" without hiding API mistakes behind an HTML page.
func Handler() http.Handler {
	assets := make(map[string]asset)
	err := fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) {
		// The OS mime table may lack these or map .js to text/plain, which
		// the browser refuses for modules under nosniff.
		case ".js":
			ct = "text/javascript; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".html":
			ct = "text/html; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		if ct == "" {
			ct = "application/octet-stream"
		}
		assets["/"+p] = asset{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		// The files are compiled in; failing to read them is a build defect.
		panic("dashboard: reading embedded assets: " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		p := r.URL.Path
		if p == "/" {
			p = "/index.html"
		}
		a, ok := assets[p]
		if !ok || (p != "/index.html" && !strings.HasPrefix(p, "/assets/")) {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		h.Set("Content-Type", a.contentType)
		h.Set("ETag", a.etag)
		// Revalidate every time: the ETag makes that a cheap 304, and an
		// upgraded server is never mixed with a stale cached module.
		h.Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	})
}
