// Package client is a Go client of the Norn HTTP API. *Client implements
// norn.Store, so code written against the embedded store runs unchanged
// against a remote server: the same methods, the same typed errors
// (errors.Is(err, norn.ErrLeaseLost) works across the network), streaming
// lists (NDJSON) and event subscriptions (server-sent events).
//
//	c, err := client.New("http://127.0.0.1:7070", client.WithToken(tok))
//	subs, err := c.Submit(ctx, norn.NewTask{Queue: "emails", Spec: spec})
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// DefaultUserAgent is sent unless WithUserAgent says otherwise.
const DefaultUserAgent = "norn-go-client/1"

// maxErrorBody caps how much of an error response is read: an error body is
// a small JSON object, and a misbehaving proxy must not make us buffer more.
const maxErrorBody = 64 << 10

// claimSlack is added to a claim's Wait when the HTTP client has an overall
// timeout, so the long poll ends on the server's schedule, not ours.
const claimSlack = 30 * time.Second

// Client talks to a norn server. It is safe for concurrent use.
type Client struct {
	base   *url.URL
	token  string
	ua     string
	hc     *http.Client
	closed atomic.Bool
}

var _ norn.Store = (*Client)(nil)

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer token" on every request.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient uses hc instead of a client of its own (default: a fresh
// http.Client with no overall timeout, so contexts bound every call). If hc
// has a Timeout, long polls and streams are given a copy with a longer or no
// timeout, because a claim that waits 30 s must not be cut at 10 s.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithUserAgent sets the User-Agent header (default DefaultUserAgent).
func WithUserAgent(ua string) Option { return func(c *Client) { c.ua = ua } }

// New returns a client of the server at baseURL ("http://host:port", with or
// without a trailing slash; a path prefix is kept for servers behind a proxy).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(baseURL))
	if err != nil {
		return nil, norn.Invalid("server", "invalid server URL %q: %v", baseURL, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, norn.Invalid("server", "server URL %q must start with http:// or https://", baseURL)
	}
	if u.Host == "" {
		return nil, norn.Invalid("server", "server URL %q has no host", baseURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	c := &Client{base: u, ua: DefaultUserAgent}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	return c, nil
}

// BaseURL returns the server URL the client talks to.
func (c *Client) BaseURL() string { return c.base.String() }

// Close releases idle connections. Calls after Close fail with an
// unavailable error (errors.Is(err, norn.ErrClosed)).
func (c *Client) Close() error {
	c.closed.Store(true)
	c.hc.CloseIdleConnections()
	return nil
}

// errClosed is returned by calls after Close; it matches norn.ErrClosed.
var errClosed = norn.Closed("client is closed")

// decodeError turns a non-2xx response into a *norn.Error carrying the
// server's code, message and field.
func decodeError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var eb wire.ErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error != nil && eb.Error.Code != "" {
		return eb.Error.Err()
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &norn.Error{Code: wire.CodeOfStatus(resp.StatusCode), Message: fmt.Sprintf("HTTP %d: %s", resp.StatusCode, msg)}
}

// transportError wraps a failure to reach the server. It stays an
// unavailable *norn.Error, and errors.Is(err, context.Canceled) still works
// through Unwrap when the caller's context ended.
func transportError(err error) error {
	return norn.Unavailable(err)
}

// request describes one API call.
type request struct {
	method string
	path   string // already escaped, starting with /v1
	query  url.Values
	body   any // JSON-encoded when non-nil
	// raw is a body already encoded as JSON; it wins over body.
	raw    []byte
	accept string
}

func (c *Client) url(path string, q url.Values) string {
	s := c.base.String() + path
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

// send performs r and returns the response when its status is 2xx; other
// statuses become *norn.Error. The caller closes the body.
func (c *Client) send(ctx context.Context, hc *http.Client, r request) (*http.Response, error) {
	if c.closed.Load() {
		return nil, errClosed
	}
	var body io.Reader
	if r.raw != nil {
		body = bytes.NewReader(r.raw)
	} else if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, norn.Invalid("", "cannot encode request: %v", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.url(r.path, r.query), body)
	if err != nil {
		return nil, norn.Invalid("", "cannot build request: %v", err)
	}
	if r.body != nil || r.raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	accept := r.accept
	if accept == "" {
		accept = "application/json"
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", c.ua)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// The caller's span travels as a W3C traceparent header: the server's
	// span for the call is its child, and a submit stores it with the
	// tasks that carry no trace context of their own. Without a span in
	// ctx this adds nothing.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := hc.Do(req)
	if err != nil {
		return nil, transportError(err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// do performs r and decodes a JSON response into out (when non-nil).
func (c *Client) do(ctx context.Context, r request, out any) error {
	return c.doWith(ctx, c.hc, r, out)
}

func (c *Client) doWith(ctx context.Context, hc *http.Client, r request, out any) error {
	resp, err := c.send(ctx, hc, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if ctx.Err() != nil {
			return transportError(ctx.Err())
		}
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		if errors.As(err, &se) || errors.As(err, &te) {
			return &norn.Error{Code: norn.CodeInternal, Message: "cannot decode server response", Err: err}
		}
		return transportError(err)
	}
	return nil
}

// withTimeoutAtLeast returns an http.Client whose overall timeout is 0 (none)
// or at least d, reusing c.hc when it already qualifies.
func (c *Client) withTimeoutAtLeast(d time.Duration) *http.Client {
	if c.hc.Timeout == 0 || (d > 0 && c.hc.Timeout >= d) {
		return c.hc
	}
	hc := *c.hc
	hc.Timeout = d // d == 0 means no timeout, as streams need
	return &hc
}

// taskPath escapes one id as a single path segment.
func taskPath(id string, suffix string) string {
	return "/v1/tasks/" + url.PathEscape(id) + suffix
}

// checkID rejects ids that cannot be put in a URL path segment with the
// same error a store gives for an invalid id.
func checkID(field, id string) error {
	if id == "" {
		return norn.Invalid(field, "id is required")
	}
	return nil
}
