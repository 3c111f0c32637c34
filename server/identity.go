package server

import (
	"context"
	"errors"
	"sync"

	"github.com/nornq/norn"
)

// Worker identity (docs/security.md, docs/workers.md). With tokens, a
// worker id belongs to the token that registered it: the server records a
// key derived from that token (never the token) as the worker's registrar
// in the store's worker record, and a claim or a lease call naming a
// worker is refused unless the calling token registered it. An unknown
// worker id is refused alike, so the answer does not tell whether another
// token's worker exists. Admin tokens may act for any registered worker;
// without tokens everyone may do everything, as everywhere else.
//
// The binding lives in the store, so every node of a cluster enforces the
// same one; nodes only cache it, which is safe because a worker's
// registrar never changes.

// maxCachedWorkers bounds the registrar cache; past it the cache starts over.
const maxCachedWorkers = 1 << 16

type workerCache struct {
	mu   sync.Mutex
	regs map[string]string // worker id → registrar
}

func (c *workerCache) get(id string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.regs[id]
	return r, ok
}

func (c *workerCache) put(id, registrar string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.regs == nil || len(c.regs) >= maxCachedWorkers {
		c.regs = map[string]string{}
	}
	c.regs[id] = registrar
}

// registrar is what the server records as the registrar of a worker p
// registers: the key of its token; "" without tokens.
func (s *Server) registrar(p *principal) string {
	if s.auth == nil {
		return ""
	}
	return p.key
}

// notYourWorker is the refusal of a worker id the caller did not register.
func notYourWorker(id string) error {
	return norn.Errorf(norn.CodePermissionDenied,
		"worker %q was not registered with this token: register a worker (POST /v1/workers) with it and use that id", id)
}

// checkWorker refuses a claim or lease call of p naming worker unless p's
// token registered it.
func (s *Server) checkWorker(ctx context.Context, p *principal, worker string) error {
	if s.auth == nil || p.role == RoleAdmin || s.workers == nil {
		return nil
	}
	reg, ok := s.cache.get(worker)
	if !ok {
		info, err := s.workers.Worker(ctx, worker)
		switch {
		case errors.Is(err, norn.ErrNotFound):
			return notYourWorker(worker)
		case err != nil:
			return err
		}
		reg = info.Registrar
		s.cache.put(worker, reg)
	}
	if reg == "" || reg != p.key {
		return notYourWorker(worker)
	}
	return nil
}
