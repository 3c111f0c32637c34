package norn

import (
	"context"
	"time"
)

// Sequences: the decisions every store makes the same way.
//
// A task submitted with a SequenceKey joins the sequence of its queue and
// key. A sequence has at most one head: the one task of it that may be
// scheduled, ready or running. Every later member waits, blocked, in
// submit order. When the head ends, the next member becomes the head (it
// is released: ready, or scheduled while its run_at is ahead), so the
// members run one at a time and in the order they were submitted, whatever
// their priorities; other keys, and tasks without a key, flow as usual.
//
// A head that fails and retries holds the sequence through its retries. A
// head that ends aborted halts the sequence (it stays the head, and
// Halted is set) until it is retried (it runs again as the head), or
// deleted (the next member becomes the head), unless its queue's
// SequenceOnFailure is SequenceContinue. A cancelled head, or a completed
// one, always moves the sequence on. A waiting member that ends (cancelled,
// expired) or is deleted leaves the sequence without moving it.

// SequenceOnFailure values (QueueDefaults.SequenceOnFailure).
const (
	// SequenceHalt (the default, "") keeps an aborted head as the head, and
	// the sequence halted, until the head is retried or deleted.
	SequenceHalt = "halt"
	// SequenceContinue moves the sequence on past an aborted head.
	SequenceContinue = "continue"
)

// Sequencer is implemented by every store and the HTTP client.
type Sequencer interface {
	// Sequence reads the state of the sequence of queue and key. A
	// sequence nobody used reads as empty.
	Sequence(ctx context.Context, queue, key string) (SequenceInfo, error)
	// Sequences lists queue's sequences that have a head (those with
	// members not yet run, and halted ones), by key.
	Sequences(ctx context.Context, queue string, q SequenceQuery) ([]SequenceInfo, error)
}

// SequenceQuery selects and pages Sequences.
type SequenceQuery struct {
	// Halted: only halted sequences.
	Halted bool `json:"halted,omitempty"`
	// After: only keys that sort after this one (the previous page's
	// last key).
	After string `json:"after,omitempty"`
	// Limit: page size (default 100, max 1000).
	Limit int `json:"limit,omitempty"`
}

// Validate checks the query and fills in the default limit.
func (q *SequenceQuery) Validate() error {
	if q.Limit == 0 {
		q.Limit = DefaultListLimit
	}
	if q.Limit < 1 || q.Limit > MaxListLimit {
		return Invalid("limit", "must be between 1 and %d", MaxListLimit)
	}
	if q.After != "" {
		return ValidateSequenceKey("after", q.After)
	}
	return nil
}

// MaxSequenceKeyLength bounds NewTask.SequenceKey.
const MaxSequenceKeyLength = 256

// SequenceInfo is the state of one sequence (Store.Sequence).
type SequenceInfo struct {
	Queue string `json:"queue"`
	Key   string `json:"key"`
	// Head is the task that may run now (empty: none; the next task
	// submitted with the key becomes the head at once).
	Head string `json:"head,omitempty"`
	// HeadStatus is the head's status.
	HeadStatus Status `json:"head_status,omitempty"`
	// Halted: the head ended aborted and the queue's policy is
	// SequenceHalt. Retry the head, or delete it, to go on.
	Halted bool `json:"halted"`
	// Waiting counts the members waiting for their turn.
	Waiting int `json:"waiting"`
}

// ValidateSequenceKey checks a sequence key: 1..256 bytes of valid UTF-8
// without control characters.
func ValidateSequenceKey(field, key string) error {
	return validateKey(field, key, MaxSequenceKeyLength)
}

// ValidateSequenceOnFailure checks a queue's sequence_on_failure.
func ValidateSequenceOnFailure(field, v string) error {
	switch v {
	case "", SequenceHalt, SequenceContinue:
		return nil
	}
	return Invalid(field, "must be %q or %q, not %q", SequenceHalt, SequenceContinue, v)
}

// SequenceMovesOn decides whether the head of a sequence, having ended in
// status s in a queue whose policy is policy, hands the sequence to the
// next member (true) or halts it (false).
func SequenceMovesOn(s Status, policy string) bool {
	switch s {
	case StatusCompleted, StatusCancelled:
		return true
	case StatusAborted:
		return policy == SequenceContinue
	}
	return false
}

// SequenceTurn is the status of a member that becomes the head at now:
// scheduled while its run_at is ahead, otherwise ready.
func SequenceTurn(runAt, now time.Time) Status {
	if runAt.After(now) {
		return StatusScheduled
	}
	return StatusReady
}

// CheckSequenceRetry decides whether a retry may bring back t, a member of
// sequence q (read under the store's lock of the sequence): only as the
// sequence's head (a halted one), or when the sequence has no head, which
// t then becomes. Bringing back another member would let it run beside
// the head.
func CheckSequenceRetry(t *Task, q SequenceInfo) error {
	if q.Head == "" || q.Head == t.ID {
		return nil
	}
	return Errorf(CodeConflict, "task %q is in sequence %q, whose head is %q: retry that one (or delete it) first",
		t.ID, t.SequenceKey, q.Head)
}
