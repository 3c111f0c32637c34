// Package oacheck checks HTTP traffic against the server's OpenAPI document.
// It is test tooling: the Go tests wrap every real server they start with
// Middleware (see internal/servertest), and internal/oaproxy puts the same
// check in front of the server the Python and TypeScript suites drive, so
// the document cannot drift from what the server does.
//
// A mismatch is one of:
//   - a response whose status, content type or body the document does not
//     allow for that operation;
//   - a request the document refuses (body, path or query parameters) that
//     the server nonetheless answered with a success status;
//   - a success to a method the document does not list for a path it
//     describes.
//
// A request the document allows but the server refuses with 4XX is not a
// mismatch: the server checks more than a schema can say (ranges, states).
// Paths the document does not describe (the dashboard, probes of unknown
// routes) are not checked.
package oacheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
)

// maxBody is how much of a body is kept for the check; a longer body is
// passed through unchecked (the check of its status still runs).
const maxBody = 16 << 20

// Checker validates exchanges against one document.
type Checker struct {
	doc *openapi3.T
}

var registerDecoders sync.Once

// New loads and validates an OpenAPI 3.1 document.
func New(spec []byte) (*Checker, error) {
	registerDecoders.Do(func() {
		openapi3filter.RegisterBodyDecoder("application/x-ndjson", openapi3filter.FileBodyDecoder)
		openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.FileBodyDecoder)
	})
	doc, err := openapi3.NewLoader().LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("loading the OpenAPI document: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("the OpenAPI document is not valid: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("the document declares OpenAPI %s; the any-JSON fields need 3.1's JSON Schema", doc.OpenAPI)
	}
	// In OpenAPI 3.1 the empty schema {} accepts every JSON value, null
	// included. kin-openapi validates schemas holding $refs with its 3.0
	// validator, which refuses null there; the boolean schema true means
	// exactly the same as {} and that validator honours it.
	seen := map[*openapi3.Schema]bool{}
	var walk func(*openapi3.SchemaRef)
	walk = func(ref *openapi3.SchemaRef) {
		if ref == nil || ref.Value == nil || seen[ref.Value] {
			return
		}
		s := ref.Value
		seen[s] = true
		if s.Always == nil && s.IsEmpty() {
			always := true
			s.Always = &always
			return
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
		walk(s.AdditionalProperties.Schema)
		for _, group := range []openapi3.SchemaRefs{s.AllOf, s.AnyOf, s.OneOf} {
			for _, r := range group {
				walk(r)
			}
		}
	}
	for _, ref := range doc.Components.Schemas {
		walk(ref)
	}
	return &Checker{doc: doc}, nil
}

// Doc returns the loaded document.
func (c *Checker) Doc() *openapi3.T { return c.doc }

// Route matches a concrete path against the document's path templates,
// preferring the template with the most literal segments (/v1/tasks/count
// over /v1/tasks/{id}), as the server's mux does. It returns nil when the
// document has no operation for method and path.
func (c *Checker) Route(method, path string) (*routers.Route, map[string]string) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	var best *routers.Route
	var bestParams map[string]string
	bestLiterals := -1
	for tmpl, item := range c.doc.Paths.Map() {
		tsegs := strings.Split(strings.Trim(tmpl, "/"), "/")
		if len(tsegs) != len(segs) {
			continue
		}
		params := map[string]string{}
		literals := 0
		ok := true
		for i, ts := range tsegs {
			if strings.HasPrefix(ts, "{") {
				params[strings.Trim(ts, "{}")] = segs[i]
				continue
			}
			if ts != segs[i] {
				ok = false
				break
			}
			literals++
		}
		op := item.GetOperation(method)
		if !ok || op == nil || literals <= bestLiterals {
			continue
		}
		best = &routers.Route{Spec: c.doc, Path: tmpl, PathItem: item, Method: method, Operation: op}
		bestParams, bestLiterals = params, literals
	}
	return best, bestParams
}

// Exchange is one request and its response.
type Exchange struct {
	Request     *http.Request
	RequestBody []byte
	Status      int
	Header      http.Header
	Body        []byte
	// Truncated says Body is incomplete: its schema is not checked.
	Truncated bool
}

// Check returns the exchange's mismatches with the document, nil when it
// matches or the document does not describe the path.
func (c *Checker) Check(x Exchange) error {
	r := x.Request
	route, params := c.Route(r.Method, r.URL.Path)
	if route == nil {
		return c.checkUndocumented(x)
	}
	req := r.Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(x.RequestBody))
	req.ContentLength = int64(len(x.RequestBody))
	if len(x.RequestBody) == 0 {
		req.Body = http.NoBody
	}
	in := &openapi3filter.RequestValidationInput{
		Request:    req,
		PathParams: params,
		Route:      route,
		Options: &openapi3filter.Options{
			MultiError:                        true,
			RejectWhenRequestBodyNotSpecified: true,
			// Who may call what is the server's auth tests' business;
			// the document's part is the security alternatives it lists.
			AuthenticationFunc: func(context.Context, *openapi3filter.AuthenticationInput) error { return nil },
		},
	}
	var errs []error
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil && x.Status < 400 {
		errs = append(errs, fmt.Errorf("the server answered %d to a request the document refuses: %w", x.Status, err))
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 x.Status,
		Header:                 x.Header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
			ExcludeResponseBody:   x.Truncated,
		},
	}
	out.SetBodyBytes(x.Body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		errs = append(errs, fmt.Errorf("response: %w", err))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s %s (%s %s) → %d %s\nrequest body: %s\n%w",
		r.Method, r.URL.RequestURI(), route.Method, route.Path, x.Status, trunc(x.Body), trunc(x.RequestBody), errors.Join(errs...))
}

// checkUndocumented checks an exchange whose method the document does not
// list: on a documented path it must not succeed (HEAD, which GET routes
// serve, and CORS preflights aside).
func (c *Checker) checkUndocumented(x Exchange) error {
	r := x.Request
	if r.Method == http.MethodHead || r.Method == http.MethodOptions || x.Status >= 400 {
		return nil
	}
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if route, _ := c.Route(m, r.URL.Path); route != nil {
			return fmt.Errorf("%s %s → %d: the document does not list %s for %s", r.Method, r.URL.RequestURI(), x.Status, r.Method, route.Path)
		}
	}
	return nil
}

func trunc(b []byte) string {
	if len(b) > 400 {
		return string(b[:400]) + "…"
	}
	return string(b)
}

// Middleware checks every exchange passing through next and calls report
// with each mismatch. The check runs when the handler returns, over the
// request body the handler read and the response it wrote; the response
// streams to the client unchanged meanwhile.
func (c *Checker) Middleware(next http.Handler, report func(error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqBuf := &capBuffer{}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &teeBody{ReadCloser: r.Body, buf: reqBuf}
		}
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		x := Exchange{Request: r, RequestBody: reqBuf.b.Bytes(), Status: rec.status, Header: w.Header(),
			Body: rec.body.b.Bytes(), Truncated: rec.body.over || reqBuf.over}
		if err := c.Check(x); err != nil {
			report(err)
		}
	})
}

// capBuffer keeps the first maxBody bytes written to it.
type capBuffer struct {
	b    bytes.Buffer
	over bool
}

func (c *capBuffer) Write(p []byte) {
	if c.over || c.b.Len()+len(p) > maxBody {
		c.over = true
		return
	}
	c.b.Write(p)
}

type teeBody struct {
	io.ReadCloser
	buf *capBuffer
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.buf.Write(p[:n])
	return n, err
}

// recorder passes the response through and keeps a copy. Unwrap lets the
// server's http.ResponseController (flushes, deadlines) reach the real
// writer.
type recorder struct {
	http.ResponseWriter
	status  int
	body    capBuffer
	sniffed bool
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 && status >= 200 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if !r.sniffed {
		r.sniffed = true
		// A stream is not kept: holding it would defeat what the server's
		// streaming is for (and its tests measure). Its schema is a
		// string; its status and content type are still checked.
		switch ct, _, _ := strings.Cut(r.Header().Get("Content-Type"), ";"); ct {
		case "application/x-ndjson", "text/event-stream":
			r.body.over = true
		}
	}
	n, err := r.ResponseWriter.Write(p)
	r.body.Write(p[:n])
	return n, err
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
