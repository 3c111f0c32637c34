package norn

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"strconv"
	"strings"
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

// Ids derived by Norn's own producers. A schedule's tick and a Kafka
// bridge message each map to one task id, so that firing a tick twice (two
// nodes, a restart) or storing a message twice is an idempotent duplicate.
// A caller who took such an id first would make the producer's submission
// a conflict and silently suppress it, in any queue: a client of queue qa
// submitting schedule:report:<next tick> would stop the report schedule
// of queue qb. So these namespaces are reserved: the server refuses
// callers' submissions of such ids (ValidateCallerID), while the producers,
// which submit to the store directly, use them.
const (
	// ScheduleIDPrefix starts the id of every task a schedule submits for
	// a tick (ScheduleTaskID).
	ScheduleIDPrefix = "schedule:"
	// InternalIDPrefix is kept for Norn's own use.
	InternalIDPrefix = "norn:"
	// BridgeIDSeparator follows the queue name in the id of every task a
	// Kafka bridge stores ("<queue>~<message id>"); a queue name cannot
	// contain it.
	BridgeIDSeparator = "~"
)

// ReservedID reports whether id lies in a namespace of Norn's own
// producers, and whose: "" when it does not.
func ReservedID(id string) string {
	switch {
	case strings.HasPrefix(id, ScheduleIDPrefix):
		return "schedules (schedule:<name>:<tick>)"
	case strings.HasPrefix(id, InternalIDPrefix):
		return "Norn itself (norn:…)"
	}
	if i := strings.Index(id, BridgeIDSeparator); i > 0 && ValidQueueName(id[:i]) {
		return "the Kafka delay bridge (<queue>~…)"
	}
	return ""
}

// ValidateCallerID checks an id a caller submits over the API: a valid id
// outside the reserved namespaces (ReservedID).
func ValidateCallerID(field, id string) error {
	if err := ValidateID(field, id); err != nil {
		return err
	}
	if owner := ReservedID(id); owner != "" {
		return Invalid(field, "id %q is in a namespace reserved for %s; choose another id", truncate(id, 40), owner)
	}
	return nil
}
