package server

import (
	"net/http"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// The steps most routes share, so that a handler reads as what it decides:
// the request checked and decoded, the store called, the answer written.

func noParams(r *http.Request) error { return wire.CheckParams(r.URL.Query()) }

func pathID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	return id, norn.ValidateID("id", id)
}

// readRequest checks that r has no query parameters and decodes its JSON
// body into body (optional: an absent body leaves body as it is).
func readRequest(r *http.Request, body any, optional bool) error {
	if err := noParams(r); err != nil {
		return err
	}
	return wire.ReadBody(r.Body, body, optional)
}

// pathRequest is readRequest for a route on one named thing: path reads the
// name from the URL path and validates it (and may check the caller's scope)
// before the body, if any (body nil: the route reads none), is decoded.
func pathRequest(r *http.Request, path func(*http.Request) (string, error), body any, optional bool) (string, error) {
	if err := noParams(r); err != nil {
		return "", err
	}
	name, err := path(r)
	if err != nil {
		return "", err
	}
	if body != nil {
		if err := wire.ReadBody(r.Body, body, optional); err != nil {
			return "", err
		}
	}
	return name, nil
}

// taskRequest is pathRequest for a route on one task by id, followed by the
// caller's right to the task (checkTaskScope).
func (s *Server) taskRequest(r *http.Request, body any, optional bool) (string, error) {
	id, err := pathRequest(r, pathID, body, optional)
	if err != nil {
		return "", err
	}
	return id, s.checkTaskScope(r.Context(), principalFrom(r.Context()), id)
}

// matchingRequest reads the filter of a route acting on every matching task
// (verb names it in the error): only filter parameters, at least one of
// them, so nobody acts on a whole store by accident; then the body, if any
// (body nil: none; otherwise it may be absent); last the filter is narrowed
// to the caller's queues.
func (s *Server) matchingRequest(r *http.Request, verb string, body any) (norn.Filter, error) {
	v := r.URL.Query()
	if err := wire.CheckParams(v, wire.FilterParams); err != nil {
		return norn.Filter{}, err
	}
	f, err := wire.ParseFilter(v, s.cfg.MaxLabels)
	if err != nil {
		return f, err
	}
	if f.Empty() {
		return f, norn.Invalid("filter", "at least one filter parameter is required to %s by filter", verb)
	}
	if body != nil {
		if err := wire.ReadBody(r.Body, body, true); err != nil {
			return f, err
		}
	}
	f.Queues, err = principalFrom(r.Context()).scopeQueues(f.Queues)
	return f, err
}

// reply ends a route whose store call returned v and err: v as the 200
// answer, or err.
func reply(w http.ResponseWriter, v any, err error) error {
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}
