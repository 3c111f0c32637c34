package norn

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"strconv"
)

// Worker identity. A worker id names a worker in claims and lease calls,
// and, over HTTP with tokens, belongs to the token that registered it: the
// server records that token (WorkerInfo.Registrar) in the store's worker
// record and refuses a claim or a lease call naming a worker that the
// calling token did not register (docs/security.md). The record lives in
// the store, so every node of a cluster enforces the same binding.

// NewWorkerID returns a new worker id: "worker-" and 16 random decimal
// digits. Random, not sequential: the ids a scoped token sees must not
// show, by their gaps, how many workers other queues have.
func NewWorkerID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	const lo, span = 1_000_000_000_000_000, 9_000_000_000_000_000
	return "worker-" + strconv.FormatUint(lo+binary.BigEndian.Uint64(b[:])%span, 10)
}

// WorkerRegistry is implemented by stores that read back one worker's
// registration with its registrar; the server needs it to bind worker ids
// to the tokens that registered them.
type WorkerRegistry interface {
	// Worker returns the registration of id (Registrar included), or
	// ErrNotFound.
	Worker(ctx context.Context, id string) (WorkerInfo, error)
}

// WorkerNotFound is the not_found error for a worker id.
func WorkerNotFound(id string) *Error {
	return Errorf(CodeNotFound, "worker %q not found", id)
}
