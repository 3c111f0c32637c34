// Package server is Norn's HTTP/JSON API (docs/api.md) over any
// norn.Store: routes, request decoding with size limits, bearer-token auth
// with roles and queue scopes, long-poll claims, NDJSON streaming, server-sent
// events, Prometheus metrics, health probes and the OpenAPI document.
//
// The server is a library: the CLI (`norn server`) opens a store, builds a
// Config and calls Run; tests do the same on 127.0.0.1:0.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nornq/norn/internal/buildinfo"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// Server serves the Norn API. Create it with New, serve with Run, and
// release the listener with Close if Run is never called.
type Server struct {
	cfg   Config
	store norn.Store
	log   *slog.Logger
	auth  *authenticator
	ln    net.Listener
	http  *http.Server
	mux   *http.ServeMux
	root  http.Handler // mux behind guard
	m     *metrics
	tp    *throughput // throughput.go
	// tpDone is closed when the throughput recorder and its keeper have
	// stopped (the keeper's last write done).
	tpDone chan struct{}
	// streams caps long polls and streams; fails limits failed
	// authentications per address (limits.go).
	streams *streamLimiter
	fails   *failureLimiter
	// eventStreams caps event streams apart (limits.go); events fans the
	// store's events out to them (events.go).
	eventStreams *streamLimiter
	events       *eventHub
	// patches serializes PATCHes of one queue or schedule (scope.go).
	patches keyedMutex
	// workers reads worker registrations to bind worker ids to tokens
	// (identity.go); nil when the store cannot.
	workers norn.WorkerRegistry
	cache   workerCache

	// drainCtx is cancelled when shutdown starts, which ends long-poll
	// claims and event streams so they do not hold up the drain.
	drainCtx   context.Context
	startDrain context.CancelFunc
	runOnce    sync.Once
	closeOnce  sync.Once
	tlsConfig  *tls.Config
}

// New validates cfg, binds the listen address and builds the server. It
// does not serve until Run is called.
func New(cfg Config) (*Server, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if len(cfg.Tokens) == 0 && !isLoopback(cfg.Addr) && !cfg.AllowUnauthenticatedNonLoopback {
		return nil, norn.Invalid("Addr", "no tokens are configured, so authentication is off and %q is not a loopback address; configure tokens or set AllowUnauthenticatedNonLoopback", cfg.Addr)
	}
	s := &Server{cfg: cfg, store: cfg.Store, log: cfg.Logger, auth: newAuthenticator(cfg.Tokens),
		streams: newStreamLimiter(cfg.MaxStreams, cfg.MaxStreamsPerCaller), fails: newFailureLimiter(cfg.MaxAuthFailures, time.Minute)}
	s.workers, _ = cfg.Store.(norn.WorkerRegistry)
	if s.workers == nil && len(cfg.Tokens) > 0 {
		cfg.Logger.Warn("worker identity is not enforced: the store cannot read back worker registrations (norn.WorkerRegistry), so a worker token may claim and make lease calls as any worker id")
	}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, norn.Invalid("TLSCert", "loading the certificate and key: %v", err)
		}
		s.tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
			// TLS 1.2 only with forward-secret AEAD suites: Go's defaults
			// still accept CBC and SHA-1 suites there. TLS 1.3 suites are
			// not configurable and all modern.
			CipherSuites: []uint16{
				tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
				tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
				tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
			}}
	}
	s.m, err = newMetrics(cfg.Registry, cfg.Store, cfg.MetricsMaxQueues, cfg.MetricsInterval)
	if err != nil {
		return nil, err
	}
	s.drainCtx, s.startDrain = context.WithCancel(context.Background())
	s.eventStreams = newEventStreamLimiter(cfg.MaxEventStreams, cfg.MaxEventStreamsPerCaller)
	s.events = newEventHub(cfg.Store, cfg.Logger, s.drainCtx)
	// The history counts from here: subscribing now, not in Run, means an
	// event stored after New returns is counted.
	s.tp = newThroughput(time.Now)
	// Counts: the history only counts, so on Postgres the busiest kinds
	// travel between nodes as one line per queue and write.
	sub, err := cfg.Store.Subscribe(s.drainCtx, norn.EventFilter{Counts: true})
	if err != nil {
		cfg.Logger.Warn("throughput history: event subscription failed; retrying in the background", slog.Any("error", err))
		sub = nil
	}
	s.tpDone = make(chan struct{})
	var tpWG sync.WaitGroup
	tpWG.Add(1)
	go func() {
		defer tpWG.Done()
		s.tp.follow(s.drainCtx, cfg.Store, sub, cfg.Logger)
	}()
	if ts, ok := cfg.Store.(norn.ThroughputStore); ok {
		tpWG.Add(1)
		go func() {
			defer tpWG.Done()
			s.tp.keep(s.drainCtx, ts, cfg.Logger)
		}()
	}
	go func() {
		tpWG.Wait()
		close(s.tpDone)
	}()
	s.mux = http.NewServeMux()
	s.routes()
	s.root = s.guard(s.mux)
	if cfg.WrapHandler != nil {
		s.root = cfg.WrapHandler(s.root)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		s.startDrain()
		return nil, norn.Errorf(norn.CodeUnavailable, "listen on %s: %v", cfg.Addr, err)
	}
	if s.tlsConfig != nil {
		ln = tls.NewListener(ln, s.tlsConfig)
	}
	s.ln = ln
	s.http = &http.Server{
		Handler:           s.root,
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    DefaultMaxHeaderBytes,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Addr returns the address the server listens on (with the real port when
// Config.Addr asked for port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL returns the base URL of the server ("http://127.0.0.1:7070" or https).
func (s *Server) URL() string {
	if s.tlsConfig != nil {
		return "https://" + s.Addr()
	}
	return "http://" + s.Addr()
}

// Handler returns the server's root handler, for tests and for embedding
// the API in another server.
func (s *Server) Handler() http.Handler { return s.root }

// Run serves until ctx is done, then shuts down gracefully: it stops
// accepting connections, ends long-poll claims and event streams, waits up
// to Config.ShutdownTimeout for in-flight requests, and returns. It returns
// nil after a clean shutdown. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	started := false
	s.runOnce.Do(func() { started = true })
	if !started {
		return errors.New("server: Run called twice")
	}
	if s.auth == nil {
		s.log.Warn("no tokens configured: authentication is off", slog.String("addr", s.Addr()))
	}
	s.log.Info("norn server listening", slog.String("url", s.URL()), slog.String("version", buildinfo.Read().Short()))

	trackCtx, stopTrack := context.WithCancel(context.Background())
	trackerDone := make(chan struct{})
	go func() {
		defer close(trackerDone)
		s.m.followEvents(trackCtx, s.store, s.log)
	}()
	defer func() {
		stopTrack()
		<-trackerDone
		s.startDrain() // ends the throughput recorder's subscription
		<-s.tpDone
	}()

	serveErr := make(chan error, 1)
	go func() { serveErr <- s.http.Serve(s.ln) }()

	select {
	case err := <-serveErr:
		s.startDrain()
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	s.log.Info("shutting down: draining requests")
	s.startDrain()
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := s.http.Shutdown(sctx)
	<-serveErr
	if err != nil {
		_ = s.http.Close()
		return err
	}
	s.log.Info("server stopped")
	return nil
}

// Close stops the server at once: it closes the listener and every
// connection without draining. It does not close the store.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.startDrain()
		err = s.http.Close()
		if cerr := s.ln.Close(); cerr != nil && err == nil && !errors.Is(cerr, net.ErrClosed) {
			err = cerr
		}
		// The keeper writes the last minutes while the store, which the
		// caller closes after this, is still open.
		<-s.tpDone
	})
	return err
}

// route is one API route: who may call it and what it does.
type route struct {
	pattern string
	// roles that may call it besides admin; nil with public=true means no auth.
	roles  []Role
	public bool
	h      func(w http.ResponseWriter, r *http.Request) error
}

var (
	anyRole      = []Role{RoleClient, RoleWorker}
	clientOnly   = []Role{RoleClient}
	workerOnly   = []Role{RoleWorker}
	adminOnly    = []Role{}
	clientWorker = []Role{RoleClient, RoleWorker}
)

// apiRoutes lists every route of the API (docs/api.md) with its roles. The auth
// matrix test walks this table, so a new route cannot skip the check.
func (s *Server) apiRoutes() []route {
	return []route{
		{pattern: "POST /v1/tasks", roles: clientOnly, h: s.handleSubmit},
		{pattern: "POST /v1/tasks/batch", roles: clientOnly, h: s.handleSubmitBatch},
		{pattern: "GET /v1/tasks/count", roles: clientOnly, h: s.handleCount},
		{pattern: "GET /v1/tasks/{id}", roles: clientWorker, h: s.handleGet},
		{pattern: "GET /v1/tasks", roles: clientOnly, h: s.handleList},
		{pattern: "DELETE /v1/tasks/{id}", roles: clientOnly, h: s.handleDelete},
		{pattern: "DELETE /v1/tasks", roles: clientOnly, h: s.handleDeleteMatching},
		{pattern: "PATCH /v1/tasks/{id}", roles: clientOnly, h: s.handleUpdate},
		{pattern: "POST /v1/tasks/{id}/cancel", roles: clientOnly, h: s.handleCancel},
		{pattern: "POST /v1/tasks/{id}/retry", roles: clientOnly, h: s.handleRetry},
		{pattern: "POST /v1/tasks/retry", roles: clientOnly, h: s.handleRetryMatching},
		{pattern: "POST /v1/tasks/cancel", roles: clientOnly, h: s.handleCancelMatching},
		{pattern: "GET /v1/tasks/{id}/log", roles: clientWorker, h: s.handleReadLog},
		{pattern: "POST /v1/tasks/{id}/signals", roles: clientOnly, h: s.handleSignal},
		{pattern: "GET /v1/tasks/{id}/signals", roles: clientWorker, h: s.handleSignals},
		{pattern: "POST /v1/transactions", roles: clientOnly, h: s.handleTransact},
		{pattern: "POST /v1/workers", roles: workerOnly, h: s.handleRegisterWorker},
		{pattern: "GET /v1/workers", roles: anyRole, h: s.handleWorkers},
		{pattern: "GET /v1/whoami", roles: anyRole, h: s.handleWhoami},
		{pattern: "POST /v1/queues/{queue}/claim", roles: workerOnly, h: s.handleClaimQueue},
		{pattern: "POST /v1/claim", roles: workerOnly, h: s.handleClaim},
		{pattern: "POST /v1/tasks/{id}/heartbeat", roles: workerOnly, h: s.handleHeartbeat},
		{pattern: "POST /v1/tasks/{id}/log", roles: workerOnly, h: s.handleAppendLog},
		{pattern: "POST /v1/tasks/{id}/complete", roles: workerOnly, h: s.handleComplete},
		{pattern: "POST /v1/tasks/{id}/fail", roles: workerOnly, h: s.handleFail},
		{pattern: "POST /v1/tasks/{id}/abort", roles: workerOnly, h: s.handleAbort},
		{pattern: "POST /v1/tasks/{id}/yield", roles: workerOnly, h: s.handleYield},
		{pattern: "POST /v1/tasks/{id}/snooze", roles: workerOnly, h: s.handleSnooze},
		{pattern: "POST /v1/tasks/{id}/await", roles: workerOnly, h: s.handleAwait},
		{pattern: "POST /v1/leases/batch", roles: workerOnly, h: s.handleLeaseBatch},
		{pattern: "GET /v1/queues", roles: clientOnly, h: s.handleQueues},
		{pattern: "GET /v1/queues/{queue}", roles: clientOnly, h: s.handleQueue},
		{pattern: "PATCH /v1/queues/{queue}", roles: adminOnly, h: s.handleUpdateQueue},
		{pattern: "GET /v1/queues/{queue}/keys/{key}", roles: clientOnly, h: s.handleQueueKey},
		{pattern: "GET /v1/queues/{queue}/sequences", roles: clientOnly, h: s.handleSequences},
		{pattern: "GET /v1/queues/{queue}/sequences/{key}", roles: clientOnly, h: s.handleSequence},
		{pattern: "PUT /v1/queues/{queue}/keys/{key}", roles: adminOnly, h: s.handlePutQueueKey},
		{pattern: "DELETE /v1/queues/{queue}/keys/{key}", roles: adminOnly, h: s.handleDeleteQueueKey},
		{pattern: "GET /v1/stats", roles: clientOnly, h: s.handleStats},
		{pattern: "GET /v1/stats/throughput", roles: clientOnly, h: s.handleThroughput},
		{pattern: "POST /v1/sweep", roles: adminOnly, h: s.handleSweep},
		{pattern: "POST /v1/backup", roles: adminOnly, h: s.handleBackup},
		{pattern: "GET /v1/events", roles: clientOnly, h: s.handleEvents},
		{pattern: "GET /v1/schedules", roles: clientOnly, h: s.handleSchedules},
		{pattern: "GET /v1/schedules/{name}", roles: clientOnly, h: s.handleSchedule},
		{pattern: "PUT /v1/schedules/{name}", roles: adminOnly, h: s.handlePutSchedule},
		{pattern: "PATCH /v1/schedules/{name}", roles: adminOnly, h: s.handleUpdateSchedule},
		{pattern: "DELETE /v1/schedules/{name}", roles: adminOnly, h: s.handleDeleteSchedule},
		{pattern: "POST /v1/schedules/{name}/trigger", roles: adminOnly, h: s.handleTriggerSchedule},
		{pattern: "POST /v1/batches", roles: clientOnly, h: s.handleCreateBatch},
		{pattern: "GET /v1/batches", roles: clientOnly, h: s.handleBatches},
		{pattern: "GET /v1/batches/{id}", roles: clientOnly, h: s.handleBatch},
		{pattern: "POST /v1/batches/{id}/seal", roles: clientOnly, h: s.handleSealBatch},
		{pattern: "DELETE /v1/batches/{id}", roles: clientOnly, h: s.handleDeleteBatch},
		{pattern: "GET /v1/openapi.json", public: true, h: s.handleOpenAPI},
		{pattern: "GET /healthz", public: true, h: s.handleHealthz},
		{pattern: "GET /readyz", public: true, h: s.handleReadyz},
	}
}

func (s *Server) routes() {
	for _, rt := range s.apiRoutes() {
		s.mux.Handle(rt.pattern, s.m.instrument(rt.pattern, s.traced(rt.pattern, s.wrap(rt))))
	}
	metricsHandler := s.m.handler()
	if s.cfg.MetricsAuth {
		open := metricsHandler
		metricsHandler = s.wrap(route{pattern: "GET /metrics", roles: anyRole, h: func(w http.ResponseWriter, r *http.Request) error {
			open.ServeHTTP(w, r)
			return nil
		}})
	}
	s.mux.Handle("GET /metrics", s.m.instrument("GET /metrics", metricsHandler))
	// Unknown API paths get a JSON 404 rather than the mux's text page,
	// and a known path asked with a method it does not serve a JSON 405.
	s.mux.Handle("/v1/", s.m.instrument("/v1/", http.HandlerFunc(s.noRoute)))
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		// Without these the dashboard at "/" would answer a POST /healthz.
		s.mux.Handle(p, s.m.instrument(p, http.HandlerFunc(s.noRoute)))
	}
	if s.cfg.Dashboard != nil {
		s.mux.Handle("/", s.m.instrument("/", s.cfg.Dashboard))
	}
}

// noRoute answers a request no route took: 405 naming the methods the
// path serves, else 404.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	probe := *r
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe.Method = m
		if _, pattern := s.mux.Handler(&probe); strings.Contains(pattern, " ") {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		s.writeError(w, r, &methodNotAllowed{allow: allow,
			err: wire.WithStatus(http.StatusMethodNotAllowed, norn.Errorf(norn.CodeInvalidArgument, "%s %s is not served; this path takes %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))})
		return
	}
	s.writeError(w, r, norn.Errorf(norn.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
}

// wrap authenticates and authorizes the request, limits the body and turns
// a returned error into the JSON error response.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hasBody(r) {
			// Bound the time the body may take before anything else, so
			// a stalled body cannot hold a connection, authenticated or
			// not; the deadline is lifted once the body is read.
			rc := http.NewResponseController(w)
			_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyReadTimeout))
			r.Body = &bodyReader{ReadCloser: r.Body, header: w.Header(), rc: rc, timeout: s.cfg.BodyReadTimeout}
		}
		if !rt.public {
			if s.auth != nil {
				if wait := s.fails.blocked(clientAddr(r)); wait > 0 {
					closeNow(w)
					s.writeError(w, r, &refusal{reason: refusedAuthFailures, err: &wire.StatusError{Status: http.StatusTooManyRequests, RetryAfter: wait,
						Err: norn.Errorf(norn.CodeUnauthenticated, "too many failed authentications from this address; retry later")}})
					return
				}
			}
			p, err := s.auth.authenticate(r)
			if err != nil {
				s.fails.fail(clientAddr(r))
				s.m.authFailures.Inc()
				// The body is not read: close the connection rather
				// than wait for the rest of it.
				closeNow(w)
				s.writeError(w, r, err)
				return
			}
			if !p.roleAllowed(rt.roles) {
				s.writeError(w, r, norn.Errorf(norn.CodePermissionDenied, "role %s may not call %s", p.role, rt.pattern))
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		}
		// A query string that does not parse exactly is refused: Go's
		// lenient parsing would drop the bad pairs and widen a filter.
		if _, err := wire.ParseRawQuery(r.URL.RawQuery); err != nil {
			s.writeError(w, r, err)
			return
		}
		if err := checkContentType(r); err != nil {
			closeNow(w)
			s.writeError(w, r, err)
			return
		}
		if r.Body != nil {
			r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
		}
		if err := rt.h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

// closeNow makes the connection of a request whose body will not be read
// close as soon as the answer is written. Connection: close alone is not
// enough: the server still reads what is left of a small body before it
// closes, so a client announcing a body and never sending it held the
// connection until the body read timeout (30 s). A read deadline in the
// past ends that read at once.
func closeNow(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(-time.Second))
}
