package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"

	"github.com/nornq/norn"
)

// A scoped token must not tell another queue's task ids from unused ones,
// on any route. Routes on one id answer such an id with the store's
// not_found before calling the store (checkTaskScope). Routes that name
// many ids (transactions, lease batches, dependencies of submissions)
// cannot: the store answers an unused id with an error that depends on
// where it sits and on what else the request does (a transaction fails at
// its first bad operation, a lease batch answers per operation, a missing
// dependency is an invalid_argument naming it). So the server hides each
// id the token may not read behind an id that exists nowhere, lets the
// store answer, and puts the caller's id back into the answer: whatever
// the store says of an unused id, the caller hears of a hidden one.
//
// The rule for dependencies follows: a token may depend only on tasks it
// may read. A dependency in another queue is answered as a dependency
// that does not exist.

// hidden maps the ids a scoped principal may not read to stand-ins that
// exist nowhere (in the reserved norn: namespace, which no caller can
// submit), and back.
type hidden struct {
	stand map[string]string // caller's id → stand-in
	back  map[string]string // stand-in → caller's id
}

// hideForeign reads ids and returns the stand-ins of those in a queue p may
// not read; nil when p is not scoped or there are none (then every method
// of hidden is the identity).
func (s *Server) hideForeign(ctx context.Context, p *principal, ids []string) (*hidden, error) {
	if !p.scoped() || len(ids) == 0 {
		return nil, nil
	}
	var h *hidden
	for start := 0; start < len(ids); start += getManyChunk {
		found, _, err := s.store.GetMany(ctx, ids[start:min(start+getManyChunk, len(ids))])
		if err != nil {
			return nil, err
		}
		for _, t := range found {
			if p.checkQueue(t.Queue) == nil {
				continue
			}
			if h == nil {
				h = &hidden{stand: map[string]string{}, back: map[string]string{}}
			}
			if _, ok := h.stand[t.ID]; !ok {
				sub := standIn()
				h.stand[t.ID], h.back[sub] = sub, t.ID
			}
		}
	}
	return h, nil
}

// standIn returns an id no task has: in the namespace reserved for Norn,
// with 128 random bits.
func standIn() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return norn.InternalIDPrefix + "absent:" + hex.EncodeToString(b[:])
}

// id returns the id to send to the store in place of id.
func (h *hidden) id(id string) string {
	if h != nil {
		if sub, ok := h.stand[id]; ok {
			return sub
		}
	}
	return id
}

// ids returns ids with hidden ones replaced (a copy when any is).
func (h *hidden) ids(ids []string) []string {
	if h == nil {
		return ids
	}
	out, copied := ids, false
	for i, id := range ids {
		if sub, ok := h.stand[id]; ok {
			if !copied {
				out, copied = append([]string(nil), ids...), true
			}
			out[i] = sub
		}
	}
	return out
}

// restore puts the caller's ids back into a store error.
func (h *hidden) restore(err error) error {
	if h == nil || err == nil {
		return err
	}
	var e *norn.Error
	if !errors.As(err, &e) {
		return err
	}
	return h.restoreError(e)
}

func (h *hidden) restoreError(e *norn.Error) *norn.Error {
	if h == nil || e == nil {
		return e
	}
	msg, field := e.Message, e.Field
	for sub, id := range h.back {
		msg = strings.ReplaceAll(msg, sub, id)
		field = strings.ReplaceAll(field, sub, id)
	}
	if msg == e.Message && field == e.Field {
		return e
	}
	c := *e
	c.Message, c.Field = msg, field
	return &c
}

// newTaskDeps lists the dependencies of tasks that are not themselves
// among the submitted ids (a dependency on a task of the same submission
// is the submission's business: its id, if taken, is refused as taken).
func newTaskDeps(tasks []norn.NewTask) []string {
	var deps []string
	var own map[string]bool
	for i := range tasks {
		if len(tasks[i].DependsOn) == 0 {
			continue
		}
		if own == nil {
			own = make(map[string]bool, len(tasks))
			for j := range tasks {
				if tasks[j].ID != "" {
					own[tasks[j].ID] = true
				}
			}
		}
		for _, d := range tasks[i].DependsOn {
			if !own[d] {
				deps = append(deps, d)
			}
		}
	}
	return deps
}

// hideDeps replaces hidden dependencies of tasks in place.
func (h *hidden) hideDeps(tasks []norn.NewTask) {
	if h == nil {
		return
	}
	for i := range tasks {
		tasks[i].DependsOn = h.ids(tasks[i].DependsOn)
	}
}

// hideTxn returns tx with every hidden id replaced.
func (h *hidden) hideTxn(tx norn.Txn) norn.Txn {
	if h == nil {
		return tx
	}
	out := tx
	out.Submit = append([]norn.NewTask(nil), tx.Submit...)
	h.hideDeps(out.Submit)
	out.Update = append([]norn.TxnUpdate(nil), tx.Update...)
	for i := range out.Update {
		out.Update[i].ID = h.id(out.Update[i].ID)
	}
	out.Cancel, out.Delete = h.ids(tx.Cancel), h.ids(tx.Delete)
	out.Require = append([]norn.Requirement(nil), tx.Require...)
	for i := range out.Require {
		out.Require[i].ID = h.id(out.Require[i].ID)
	}
	return out
}

// keyedMutex serializes the read-then-write of patches per queue or
// schedule within this server.
type keyedMutex struct {
	mu    sync.Mutex
	locks map[string]*keyedLock
}

type keyedLock struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyedLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyedLock{}
		k.locks[key] = l
	}
	l.refs++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
