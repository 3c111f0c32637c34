package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"time"

	"github.com/nornq/norn"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// Addr is the TCP address to listen on. Default "127.0.0.1:7070". Use
	// "127.0.0.1:0" to pick a free port (read it back with Server.Addr).
	Addr string
	// Store holds the tasks. Required. The server never opens or closes
	// it: whoever created it (the CLI, a test) closes it after Run returns.
	Store norn.Store
	// Tokens are the accepted bearer tokens. With none, authentication is
	// off (every request may do everything), and the server refuses to
	// listen on a non-loopback address unless AllowUnauthenticatedNonLoopback
	// is set. See LoadTokens and docs/security.md.
	Tokens []Token
	// AllowUnauthenticatedNonLoopback lets a server without tokens listen on
	// a non-loopback address. Default false.
	AllowUnauthenticatedNonLoopback bool
	// TLSCert and TLSKey are PEM file paths. When both are set the server
	// speaks HTTPS only (TLS 1.2 with AEAD suites and forward secrecy, or
	// TLS 1.3); setting one without the other is an error.
	TLSCert, TLSKey string
	// CORSOrigins are the web origins ("https://app.example.com") whose
	// pages may call the API from a browser; "*" allows any. Requests from
	// any other origin than the server's own are refused with 403. Default
	// none.
	CORSOrigins []string
	// AllowedHosts are extra Host names a server without tokens answers
	// (it always answers localhost, *.localhost, IP addresses and the host
	// of Addr). Without tokens any other Host is refused, so DNS rebinding
	// cannot reach the API. Default none.
	AllowedHosts []string
	// MetricsAuth makes /metrics require a token (any role) like the API.
	// Default false: /metrics is public (see docs/security.md for what it
	// reveals).
	MetricsAuth bool
	// MetricsMaxQueues caps how many queues get series of their own in
	// /metrics; the activity of queues past it is counted under
	// queue="(other)". A queue's series are dropped once it holds no
	// tasks, which frees its place. Default 1000.
	MetricsMaxQueues int
	// MetricsInterval is how often at most /metrics is computed (the
	// store's figures read, every series gathered, the answer encoded);
	// scrapes in between get the last answer, so polling /metrics in a
	// loop costs the server and the store one answer per interval.
	// Default 1s, well below any scrape interval.
	MetricsInterval time.Duration

	// MaxBodyBytes caps every request body. Default 8 MiB.
	MaxBodyBytes int64
	// MaxSpecBytes caps the spec of one task. Default 1 MiB (norn.MaxSpecBytes,
	// which is also the most the stores accept).
	MaxSpecBytes int
	// MaxBatch caps the tasks of a batch submit, the operations of a
	// transaction and the operations of a lease batch. Default 10,000
	// (norn.MaxBatch, also the most allowed).
	MaxBatch int
	// MaxLabels caps the labels of one task. Default 64 (norn.MaxLabels,
	// also the most allowed).
	MaxLabels int
	// MaxResponseBytes caps the body of a response that lists tasks or log
	// entries without streaming (a multi-get, a list page, a log read);
	// past it the answer is 413 and the caller asks for less or streams.
	// Default 64 MiB; at least 4 MiB (one task with its spec, result and
	// history fits).
	MaxResponseBytes int64
	// MaxStreams caps the long polls (claims with a wait), event streams
	// and NDJSON lists open at once; past it they are refused with 429 and
	// Retry-After. Default 4096.
	MaxStreams int
	// MaxStreamsPerCaller is MaxStreams for one token (or, without
	// tokens, one client address). Default 256.
	MaxStreamsPerCaller int
	// MaxEventStreams caps the event streams (GET /v1/events) open at
	// once, within MaxStreams: every stream receives every event it
	// follows, so their number multiplies the server's output. On 2
	// cores, with a client submitting batches of 2,000 tasks in a loop, a
	// normal request's p99 was 3–5 ms with 16 or 32 streams open, 5–8 ms
	// with 64 and 11–23 ms with 256 (BenchmarkNormalClientUnderAbuse).
	// Default 16 per CPU core, at least 32.
	MaxEventStreams int
	// MaxEventStreamsPerCaller is MaxEventStreams for one token (or,
	// without tokens, one client address). Default 16: one such client
	// holding 16 streams while submitting batches adds about a tenth to
	// the server's CPU per batch, and a normal request's p99 stays near
	// that of the batches alone on 2 cores.
	MaxEventStreamsPerCaller int
	// MaxAuthFailures is how many failed authentications one client
	// address may make per minute; past it its requests are refused with
	// 429 until the minute is over. Default 30.
	MaxAuthFailures int
	// BodyReadTimeout bounds how long a request body may take to arrive;
	// a slower body is refused with 408 and its connection closed.
	// Default 30s.
	BodyReadTimeout time.Duration

	// PingInterval is how often /v1/events sends a ": ping" comment so
	// proxies keep the stream open. Default 15s.
	PingInterval time.Duration
	// ShutdownTimeout bounds how long Run waits for in-flight requests
	// after its context is done before closing connections. Default 30s.
	ShutdownTimeout time.Duration

	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
	// Registry receives the server's Prometheus metrics and is what /metrics
	// serves. Default: a new registry with the Go and process collectors.
	Registry *prometheus.Registry
	// TracerProvider, when set, gives every API call a server span (named
	// by its route, "POST /v1/tasks"), a child of the caller's traceparent
	// header; a submit then stores that span as the trace context of tasks
	// without their own. Default nil: no spans, and nothing is added to a
	// request's path (the traceparent header is still stored on submit).
	// See tracing.FromEnv.
	TracerProvider trace.TracerProvider
	// ReadyCheck is an optional extra readiness probe for /readyz (e.g. a
	// Kafka bridge); the store is always probed.
	ReadyCheck func(ctx context.Context) error
	// HealthCheck is an optional liveness probe of a component the server
	// runs beside the API (e.g. the Kafka bridge's broker connectivity):
	// when it fails, /healthz answers 503 naming the cause. Default none.
	HealthCheck func(ctx context.Context) error
	// Dashboard, when non-nil, is mounted at "/" (package server/dashboard).
	Dashboard http.Handler
	// WrapHandler, when set, wraps the server's whole handler: every
	// request passes through it before the Host and Origin checks. Tests
	// use it to check each request and response against the OpenAPI
	// document (see OpenAPI); a deployment has no need for it.
	WrapHandler func(http.Handler) http.Handler
}

// Defaults of Config.
const (
	DefaultAddr                     = "127.0.0.1:7070"
	DefaultMaxBodyBytes             = 8 << 20
	DefaultPingInterval             = 15 * time.Second
	DefaultShutdownTimeout          = 30 * time.Second
	DefaultMaxResponseBytes         = 64 << 20
	DefaultBodyReadTimeout          = 30 * time.Second
	DefaultMaxStreams               = 4096
	DefaultMaxStreamsPerCaller      = 256
	DefaultMaxAuthFailures          = 30
	DefaultMaxEventStreamsPerCaller = 16
	DefaultMetricsMaxQueues         = 1000
	DefaultMetricsInterval          = time.Second
	// DefaultMaxHeaderBytes bounds request headers (Go's default is 1 MiB).
	DefaultMaxHeaderBytes = 64 << 10
)

// DefaultMaxEventStreams is Config.MaxEventStreams's default: 16 event
// streams per CPU core, at least 32.
func DefaultMaxEventStreams() int { return max(32, 16*runtime.NumCPU()) }

// withDefaults returns c with defaults filled in, or an error naming the
// first invalid field.
func (c Config) withDefaults() (Config, error) {
	if c.Store == nil {
		return c, norn.Invalid("Store", "a store is required")
	}
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if err := c.sizeDefaults(); err != nil {
		return c, err
	}
	if err := c.timeDefaults(); err != nil {
		return c, err
	}
	for i, o := range c.CORSOrigins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" || u.RawQuery != "" {
			return c, norn.Invalid(fmt.Sprintf("CORSOrigins[%d]", i), "must be an origin such as https://app.example.com, got %q", o)
		}
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		if c.TLSCert == "" {
			return c, norn.Invalid("TLSCert", "TLSKey is set but TLSCert is not")
		}
		return c, norn.Invalid("TLSKey", "TLSCert is set but TLSKey is not")
	}
	for i, t := range c.Tokens {
		if err := t.validate(); err != nil {
			return c, norn.WithFieldPrefix(err, fmt.Sprintf("Tokens[%d]", i))
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// sizeDefaults fills and checks the limits on sizes and counts.
func (c *Config) sizeDefaults() error {
	bounded := []struct {
		name          string
		v             *int
		def, min, max int
	}{
		{"MaxSpecBytes", &c.MaxSpecBytes, norn.MaxSpecBytes, 1, norn.MaxSpecBytes},
		{"MaxBatch", &c.MaxBatch, norn.MaxBatch, 1, norn.MaxBatch},
		{"MaxLabels", &c.MaxLabels, norn.MaxLabels, 1, norn.MaxLabels},
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxBodyBytes < 1024 {
		return norn.Invalid("MaxBodyBytes", "must be at least 1024, got %d", c.MaxBodyBytes)
	}
	for _, f := range bounded {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < f.min || *f.v > f.max {
			return norn.Invalid(f.name, "must be between %d and %d, got %d", f.min, f.max, *f.v)
		}
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.MaxResponseBytes < 4<<20 {
		return norn.Invalid("MaxResponseBytes", "must be at least %d, got %d", 4<<20, c.MaxResponseBytes)
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"MaxStreams", &c.MaxStreams, DefaultMaxStreams}, {"MaxStreamsPerCaller", &c.MaxStreamsPerCaller, DefaultMaxStreamsPerCaller},
		{"MaxAuthFailures", &c.MaxAuthFailures, DefaultMaxAuthFailures}, {"MetricsMaxQueues", &c.MetricsMaxQueues, DefaultMetricsMaxQueues},
		{"MaxEventStreams", &c.MaxEventStreams, DefaultMaxEventStreams()},
		{"MaxEventStreamsPerCaller", &c.MaxEventStreamsPerCaller, DefaultMaxEventStreamsPerCaller}} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < 0 {
			return norn.Invalid(f.name, "must not be negative, got %d", *f.v)
		}
	}
	return nil
}

// timeDefaults fills and checks the intervals and timeouts: zero is the
// default, negative an error naming the field.
func (c *Config) timeDefaults() error {
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"MetricsInterval", &c.MetricsInterval, DefaultMetricsInterval},
		{"BodyReadTimeout", &c.BodyReadTimeout, DefaultBodyReadTimeout},
		{"PingInterval", &c.PingInterval, DefaultPingInterval},
		{"ShutdownTimeout", &c.ShutdownTimeout, DefaultShutdownTimeout},
	} {
		if *f.v == 0 {
			*f.v = f.def
		}
		if *f.v < 0 {
			return norn.Invalid(f.name, "must not be negative")
		}
	}
	return nil
}

// isLoopback reports whether addr ("host:port") only listens on loopback.
// An empty host means every interface, which is not loopback.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
