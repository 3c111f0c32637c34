package server

import (
	"context"
	_ "embed"
	"net/http"
	"time"

	"github.com/nornq/norn/internal/buildinfo"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

func (s *Server) handleQueues(w http.ResponseWriter, r *http.Request) error {
	if err := noParams(r); err != nil {
		return err
	}
	qs, err := s.store.Queues(r.Context())
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	out := make([]norn.QueueInfo, 0, len(qs))
	for _, q := range qs {
		if p.checkQueue(q.Name) == nil {
			out = append(out, q)
		}
	}
	writeJSON(w, http.StatusOK, wire.QueuesResponse{Queues: out})
	return nil
}

func pathQueue(r *http.Request) (string, error) {
	q := r.PathValue("queue")
	if err := norn.ValidateQueue("queue", q); err != nil {
		return "", err
	}
	return q, principalFrom(r.Context()).checkQueue(q)
}

func (s *Server) handleQueue(w http.ResponseWriter, r *http.Request) error {
	name, err := pathRequest(r, pathQueue, nil, false)
	if err != nil {
		return err
	}
	q, err := s.store.Queue(r.Context(), name)
	return reply(w, wire.QueueResponse{Queue: q}, err)
}

// handleUpdateQueue changes what the body names, nested settings
// included: members of retry, retention, rate_limit or a key's settings
// that the body leaves out keep their values (wire.QueuePatch). Those are
// read from the queue first; patches of one queue through this server take
// turns, so two of them cannot both read the settings the other replaces.
func (s *Server) handleUpdateQueue(w http.ResponseWriter, r *http.Request) error {
	var p wire.QueuePatch
	name, err := pathRequest(r, pathQueue, &p, false)
	if err != nil {
		return err
	}
	var cur norn.QueueInfo
	if p.Nested() {
		unlock := s.patches.lock("queue:" + name)
		defer unlock()
		if cur, err = s.store.Queue(r.Context(), name); err != nil {
			return err
		}
	}
	u := p.Update(cur)
	if err := u.Validate(); err != nil {
		return err
	}
	q, err := s.store.UpdateQueue(r.Context(), name, u)
	return reply(w, wire.QueueResponse{Queue: q}, err)
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) error {
	if err := noParams(r); err != nil {
		return err
	}
	st, err := s.store.Stats(r.Context())
	if err != nil {
		return err
	}
	if p := principalFrom(r.Context()); p.scoped() {
		st = scopeStats(st, p)
	}
	if st.Counts == nil {
		st.Counts = []norn.GroupCount{}
	}
	if st.Totals == nil {
		st.Totals = map[norn.Status]int64{}
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// scopeStats keeps only the counts of p's queues and recomputes the totals.
func scopeStats(st norn.Stats, p *principal) norn.Stats {
	out := norn.Stats{Totals: map[norn.Status]int64{}, Workers: st.Workers, ActiveWorkers: st.ActiveWorkers}
	for _, g := range st.Counts {
		if p.checkQueue(g.Queue) != nil {
			continue
		}
		out.Counts = append(out.Counts, g)
		out.Totals[g.Status] += g.Count
		out.Total += g.Count
	}
	return out
}

func (s *Server) handleSweep(w http.ResponseWriter, r *http.Request) error {
	if err := readRequest(r, &wire.Empty{}, true); err != nil {
		return err
	}
	rep, err := s.store.Sweep(r.Context())
	return reply(w, rep, err)
}

// handleEvents streams task state changes as server-sent events until the
// client goes away or the server shuts down. The stream joins the hub
// (events.go) before the headers are sent, so a client that has the
// response headers will see every later change, or a Lagged event saying
// how many it missed.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) error {
	f, err := wire.ParseEventFilter(r.URL.Query())
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	if f.Queues, err = p.scopeQueues(f.Queues); err != nil {
		return err
	}
	caller := callerKey(p, r)
	release, err := s.eventStreams.acquire(caller)
	if err != nil {
		return err
	}
	defer release()
	releaseAll, err := s.streams.acquire(caller)
	if err != nil {
		return err
	}
	defer releaseAll()
	sub, err := s.events.subscribe(f)
	if err != nil {
		return err
	}
	defer s.events.unsubscribe(sub)

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return nil
	}
	ping := time.NewTicker(s.cfg.PingInterval)
	defer ping.Stop()
	// buf is what is written; between writes, the spare buffer take
	// swaps in for the stream's pending bytes.
	var buf []byte
	for {
		var ended bool
		select {
		case <-r.Context().Done():
			return nil
		case <-s.drainCtx.Done():
			return nil
		case <-ping.C:
			buf = append(buf[:0], ": ping\n\n"...)
		case <-sub.wake:
			buf, ended = sub.take(buf, time.Now())
		}
		if len(buf) > 0 {
			if _, err := w.Write(buf); err != nil {
				return nil
			}
			if rc.Flush() != nil {
				return nil
			}
		}
		if ended {
			return nil
		}
		if cap(buf) > maxPendingBytes {
			buf = nil // a burst's buffer is not kept for the stream's life
		}
	}
}

//go:embed openapi.json
var openapiDoc []byte

// OpenAPI returns the OpenAPI 3.1 document of the API, the one
// GET /v1/openapi.json serves. The caller must not modify it.
func OpenAPI() []byte { return openapiDoc }

func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(openapiDoc)
	return nil
}

func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) error {
	if s.cfg.HealthCheck != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		if err := s.cfg.HealthCheck(ctx); err != nil {
			return &norn.Error{Code: norn.CodeUnavailable, Message: "unhealthy: " + err.Error(), Err: err}
		}
	}
	var details map[string]string
	if s.isAdmin(r) {
		details = map[string]string{"version": buildinfo.Read().Short()}
	}
	writeJSON(w, http.StatusOK, wire.StatusResponse{Status: "ok", Details: details})
	return nil
}

// readyProbeID is looked up to check the store answers: reading one id is
// cheap on every store, and both "found" and not_found mean it answered.
const readyProbeID = "norn-readyz-probe"

func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if _, err := s.store.Get(ctx, readyProbeID); err != nil && norn.CodeOf(err) != norn.CodeNotFound {
		return s.notReady(r, "store", err)
	}
	// A store that can still be read but no longer written (the embedded
	// store after a failed write or sync), or one whose database does not
	// answer, is not ready.
	if rs, ok := s.store.(interface{ Ready(context.Context) error }); ok {
		if err := rs.Ready(ctx); err != nil {
			return s.notReady(r, "store", err)
		}
	}
	if s.cfg.ReadyCheck != nil {
		if err := s.cfg.ReadyCheck(ctx); err != nil {
			return &norn.Error{Code: norn.CodeUnavailable, Message: "not ready: " + err.Error(), Err: err}
		}
	}
	writeJSON(w, http.StatusOK, wire.StatusResponse{Status: "ok", Details: s.readyDetails(r)})
	return nil
}

// notReady is /readyz's 503 for a failing part: its message and cause
// class; the whole error (addresses, the database's words) only for an
// admin, since the route needs no token.
func (s *Server) notReady(r *http.Request, part string, err error) error {
	ne := wire.Classify(err)
	msg := wire.FromError(ne).Message
	if s.isAdmin(r) {
		msg = err.Error()
	}
	return &norn.Error{Code: norn.CodeUnavailable, Message: "not ready: " + part + ": " + msg, Cause: ne.Cause, Err: err}
}

// isAdmin reports whether r carries an admin's token (every caller is an
// admin when authentication is off), on a route that needs none.
func (s *Server) isAdmin(r *http.Request) bool {
	p, err := s.auth.authenticate(r)
	return err == nil && p.role == RoleAdmin
}

// readyDetails is what an admin learns from /readyz beyond the verdict
// (nil for anyone else: the route needs no token).
func (s *Server) readyDetails(r *http.Request) map[string]string {
	if !s.isAdmin(r) {
		return nil
	}
	d := map[string]string{}
	if rw, ok := s.store.(interface{ ReplicationWarning() string }); ok {
		if w := rw.ReplicationWarning(); w != "" {
			d["replication"] = w
		}
	}
	if len(d) == 0 {
		return nil
	}
	return d
}

func (s *Server) handleWhoami(w http.ResponseWriter, r *http.Request) error {
	p := principalFrom(r.Context())
	writeJSON(w, http.StatusOK, wire.WhoamiResponse{Role: string(p.role), Queues: p.queues, Auth: len(s.cfg.Tokens) > 0})
	return nil
}

// The routes of one concurrency key's settings are views of the queue's:
// PUT and DELETE are UpdateQueue with that one key, GET reads it from Queue.

func pathKey(r *http.Request) (string, error) {
	k := r.PathValue("key")
	return k, norn.ValidateConcurrencyKey("key", k)
}

// keyOf finds key in a queue's keys; a key without settings or running
// tasks reads as its defaults.
func keyOf(q norn.QueueInfo, key string) norn.KeyInfo {
	for _, k := range q.Keys {
		if k.Key == key {
			return k
		}
	}
	return norn.KeyInfo{Key: key}
}

// queueKeyRequest reads what the routes of one key's settings start with:
// no query parameters, the queue (in the caller's scope), then the key.
func queueKeyRequest(r *http.Request) (queue, key string, err error) {
	if queue, err = pathRequest(r, pathQueue, nil, false); err != nil {
		return "", "", err
	}
	key, err = pathKey(r)
	return queue, key, err
}

func (s *Server) handleQueueKey(w http.ResponseWriter, r *http.Request) error {
	name, key, err := queueKeyRequest(r)
	if err != nil {
		return err
	}
	q, err := s.store.Queue(r.Context(), name)
	return reply(w, wire.KeyResponse{Key: keyOf(q, key)}, err)
}

// handleSequence answers a sequence's state (GET
// /v1/queues/{queue}/sequences/{key}).
func (s *Server) handleSequence(w http.ResponseWriter, r *http.Request) error {
	name, err := pathRequest(r, pathQueue, nil, false)
	if err != nil {
		return err
	}
	key := r.PathValue("key")
	if err := norn.ValidateSequenceKey("key", key); err != nil {
		return err
	}
	info, err := s.store.Sequence(r.Context(), name, key)
	return reply(w, wire.SequenceResponse{Sequence: info}, err)
}

// handleSequences lists a queue's sequences (GET
// /v1/queues/{queue}/sequences).
func (s *Server) handleSequences(w http.ResponseWriter, r *http.Request) error {
	q, err := wire.ParseSequenceQuery(r.URL.Query())
	if err != nil {
		return err
	}
	name, err := pathQueue(r)
	if err != nil {
		return err
	}
	list, err := s.store.Sequences(r.Context(), name, q)
	return reply(w, wire.SequencesResponse{Sequences: list}, err)
}

func (s *Server) handlePutQueueKey(w http.ResponseWriter, r *http.Request) error {
	var ks norn.KeySettings
	return s.updateQueueKey(w, r, &ks)
}

func (s *Server) handleDeleteQueueKey(w http.ResponseWriter, r *http.Request) error {
	return s.updateQueueKey(w, r, nil)
}

// updateQueueKey sets (ks non-nil: read from the body) or removes a key's settings.
func (s *Server) updateQueueKey(w http.ResponseWriter, r *http.Request, ks *norn.KeySettings) error {
	name, key, err := queueKeyRequest(r)
	if err != nil {
		return err
	}
	if ks != nil {
		if err := wire.ReadBody(r.Body, ks, false); err != nil {
			return err
		}
	}
	if ks != nil {
		if err := norn.ValidateKeySettings("", *ks); err != nil {
			return err
		}
	}
	q, err := s.store.UpdateQueue(r.Context(), name, norn.QueueUpdate{Keys: map[string]*norn.KeySettings{key: ks}})
	return reply(w, wire.KeyResponse{Key: keyOf(q, key)}, err)
}
