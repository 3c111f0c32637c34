package server

import (
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// Defences every request passes before it reaches a route (see
// docs/security.md for the threats they answer):
//   - without tokens, only Host values that name a loopback address, an IP
//     address or the configured listen address are answered, so a DNS
//     rebinding page (evil.example resolving to 127.0.0.1) gets nothing;
//   - a request whose Origin is another site is refused unless
//     Config.CORSOrigins allows it, so a web page the user visits cannot
//     drive the API through the browser (no cookies are needed for that
//     when authentication is off);
//   - JSON routes take only Content-Type: application/json bodies, which a
//     cross-site page cannot send without a CORS preflight.

// guard wraps the whole server: Host and Origin checks and CORS.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.auth == nil && !s.hostAllowed(r.Host) {
			s.writeError(w, r, wire.WithStatus(http.StatusMisdirectedRequest,
				norn.Errorf(norn.CodePermissionDenied, "host %q is not served: without tokens this server only answers requests addressed to a loopback name or address, an IP address or its listen address", wire.Trunc(r.Host))))
			return
		}
		origin := r.Header.Get("Origin")
		if origin != "" && !s.sameOrigin(origin, r) {
			if !slices.Contains(s.cfg.CORSOrigins, origin) && !slices.Contains(s.cfg.CORSOrigins, "*") {
				s.writeError(w, r, norn.Errorf(norn.CodePermissionDenied, "origin %q may not call this server (allow it with --cors-origin)", wire.Trunc(origin)))
				return
			}
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
				h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE")
				h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Accept")
				h.Set("Access-Control-Max-Age", "600")
				w.WriteHeader(http.StatusNoContent)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether a Host header may be answered by a server
// without tokens: a loopback name (localhost, *.localhost), any IP
// address (DNS rebinding needs a name), or the host of the listen address.
func (s *Server) hostAllowed(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	if h == "" {
		return false
	}
	if h == "localhost" || strings.HasSuffix(h, ".localhost") || net.ParseIP(h) != nil {
		return true
	}
	if lh, _, err := net.SplitHostPort(s.cfg.Addr); err == nil && strings.EqualFold(lh, h) {
		return true
	}
	return slices.ContainsFunc(s.cfg.AllowedHosts, func(a string) bool { return strings.EqualFold(a, h) })
}

// sameOrigin reports whether origin is this server as the request reached
// it (the dashboard's own calls).
func (s *Server) sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false // "null" (sandboxed frames, file:) is never this server
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return u.Scheme == scheme && strings.EqualFold(u.Host, r.Host)
}

// hasBody reports whether the request carries a body (announced length or
// chunked).
func hasBody(r *http.Request) bool {
	return r.ContentLength > 0 || (r.ContentLength < 0 && r.Body != nil && r.Body != http.NoBody)
}

// checkContentType refuses a body that is not declared as JSON.
func checkContentType(r *http.Request) error {
	if !hasBody(r) {
		return nil
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		return nil
	}
	if ct == "" {
		ct = "none"
	}
	return wire.WithStatus(http.StatusUnsupportedMediaType,
		norn.Invalid("Content-Type", "request bodies must be sent as Content-Type: application/json, got %s", wire.Trunc(ct)))
}

// bodyReader bounds the time a request body may take to arrive and turns
// read failures into the client's errors: a body that stalls is refused
// after Config.BodyReadTimeout, and a malformed body (broken chunked
// encoding, a connection cut mid-body) is a 400, not an internal error.
// Once the body is fully read the deadline is lifted, so a long poll or an
// event stream that follows is not cut by it.
type bodyReader struct {
	io.ReadCloser
	header  http.Header // of the response: a failed body closes the connection
	rc      *http.ResponseController
	timeout time.Duration
	done    bool
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == nil || b.done {
		return n, err
	}
	b.done = true
	if err == io.EOF {
		_ = b.rc.SetReadDeadline(time.Time{})
		return n, err
	}
	// The deadline stays: the server's discarding of the unread rest must
	// not wait for it either.
	// The rest of the request cannot be trusted to arrive or to parse.
	b.header.Set("Connection", "close")
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return n, err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return n, wire.WithStatus(http.StatusRequestTimeout, norn.Invalid("body", "was not received within %s", b.timeout))
	}
	return n, norn.Invalid("body", "cannot be read: %v", err)
}
