package norn

import (
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// Validate checks one lease operation, the same way whoever receives it:
// the server before a batch reaches a store, and each store for callers that
// embed it. Errors name the field without a batch prefix.
func (op *LeaseOp) Validate() error {
	switch op.Op {
	case OpHeartbeat, OpComplete, OpFail, OpAbort, OpYield, OpSnooze:
	case "":
		return Invalid("op", "is required")
	default:
		return Invalid("op", "must be heartbeat, complete, fail, abort, yield or snooze, got %q", truncOp(string(op.Op)))
	}
	if err := op.LeaseRef.Validate(); err != nil {
		return err
	}
	if op.Progress != nil {
		if err := ValidateProgress("progress", *op.Progress); err != nil {
			return err
		}
	}
	if op.Extend < 0 {
		return Invalid("extend", "must not be negative")
	}
	// A result or an error is checked whenever one is given, whatever the
	// op: a server refuses what it would not store.
	if err := ValidateJSON("result", op.Result, MaxResultBytes); err != nil {
		return err
	}
	if op.Error != nil {
		if err := ValidateErrorInfo("error", *op.Error); err != nil {
			return err
		}
		if op.Error.RetryIn > 0 && op.Op != OpFail {
			return Invalid("error.retry_in", "only a fail asks for a retry wait, not %s", op.Op)
		}
	} else if op.Op == OpFail || op.Op == OpAbort {
		return Invalid("error", "%s needs an error", op.Op)
	}
	if op.Op == OpSnooze {
		if err := op.Snooze.Validate(); err != nil {
			return err
		}
	}
	return op.ValidateRange()
}

// truncOp keeps an unknown op name short enough to echo in an error.
func truncOp(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…", s[:cut])
}

// AfterYield decides what Yield does to a running task at now: ready at
// once, its run_at moved to now so that it queues behind tasks that were
// already waiting at its priority. The caller gives the attempt back
// (Attempts - 1) and keeps the lease number, as for a snooze.
func AfterYield(now time.Time) Outcome {
	return Outcome{Status: StatusReady, RunAt: now, History: TaskYield}
}

// ValidateInBatch is Validate for an operation of a lease batch, which
// cannot wait for a signal: that snooze reads and writes the task's
// signals, a call of its own (Snooze).
func (op *LeaseOp) ValidateInBatch() error {
	if err := op.Validate(); err != nil {
		return err
	}
	if op.Op == OpSnooze && op.Snooze.UntilSignal != "" {
		return Invalid("until_signal", "a wait for a signal is a snooze call of its own, not a lease batch operation")
	}
	return nil
}

// ValidateBatchSize refuses a lease batch of more than MaxBatch operations;
// each operation is then checked on its own (ValidateInBatch) and refused
// alone.
func ValidateBatchSize(ops []LeaseOp) error {
	if len(ops) > MaxBatch {
		return TooLarge("ops", "batch has %d operations, more than the limit of %d", len(ops), MaxBatch)
	}
	return nil
}

// BatchOpError is err as the error of a lease batch's op i: a norn error
// with its field under "ops[i]", so the caller sees which op it was; any
// other error becomes internal.
func BatchOpError(i int, err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if !errors.As(err, &e) {
		return &Error{Code: CodeInternal, Message: err.Error()}
	}
	return WithFieldPrefix(e, fmt.Sprintf("ops[%d]", i)).(*Error)
}
