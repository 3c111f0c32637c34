package norn

import (
	"context"
	"encoding/json"
	"time"
)

// Signals: anyone allowed to change a task may send it a named signal with
// data; the task keeps every signal it received, in order. A worker can
// snooze its task until a signal (Snooze.UntilSignal): the task stays
// scheduled until a signal of that name arrives (then ready at once) or
// the wait's timeout passes (then ready, the wait not received). A signal
// sent before the wait began counts: the snooze then makes the task ready
// at once. The task's claim carries its signals and its last wait.

// Signal is one signal a task received.
type Signal struct {
	// Seq numbers a task's signals from 1 in the order received.
	Seq  uint64          `json:"seq"`
	Name string          `json:"name"`
	Data json.RawMessage `json:"data,omitempty"`
	Time time.Time       `json:"time"`
}

// NewSignal is a signal to send.
type NewSignal struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data,omitempty"`
}

// SignalWait is a task's last wait for a signal (Snooze.UntilSignal).
type SignalWait struct {
	Name string `json:"name"`
	// Until is when the wait times out.
	Until time.Time `json:"until"`
	// Received is true once a signal of that name arrived (before or
	// during the wait); a task that runs again with it false timed out.
	Received bool `json:"received"`
}

// Limits of signals.
const (
	MaxSignalNameLength = 128
	MaxSignalDataBytes  = 64 << 10
	// MaxSignals bounds the signals one task keeps.
	MaxSignals = 1000
	// DefaultSignalTimeout is a signal wait's timeout when none is given.
	DefaultSignalTimeout = 24 * time.Hour
)

// Signaler is implemented by every store and the HTTP client.
type Signaler interface {
	// Signal appends a signal to task id: not_found for a missing task,
	// conflict for one that ended. A task waiting for that name becomes
	// ready.
	Signal(ctx context.Context, id string, s NewSignal) (*Signal, error)
	// Signals returns task id's signals with Seq > after, in order.
	Signals(ctx context.Context, id string, after uint64) ([]Signal, error)
}

// Validate checks a signal to send.
func (s *NewSignal) Validate() error {
	if err := validateKey("name", s.Name, MaxSignalNameLength); err != nil {
		return err
	}
	return ValidateJSON("data", s.Data, MaxSignalDataBytes)
}

// CheckSignal refuses a signal to a task in status st (ended ones) and one
// beyond MaxSignals.
func CheckSignal(id string, st Status, have uint64) error {
	if st.Terminal() {
		return Errorf(CodeConflict, "task %q is %s; only a task that has not ended can receive signals", id, st)
	}
	if have >= MaxSignals {
		return Errorf(CodeConflict, "task %q has received %d signals, the most one task keeps", id, have)
	}
	return nil
}

// AfterSignalWait decides what a snooze until a signal does to a running
// task at now: ready at once when a signal of that name was received
// already, else scheduled until the wait's timeout. The wait to record is
// returned with it.
func AfterSignalWait(now time.Time, s Snooze, received bool) (Outcome, SignalWait) {
	timeout := s.Timeout.D()
	if timeout <= 0 {
		timeout = DefaultSignalTimeout
	}
	w := SignalWait{Name: s.UntilSignal, Until: now.Add(timeout).UTC(), Received: received}
	if received {
		return Outcome{Status: StatusReady, RunAt: now, History: TaskSnooze}, w
	}
	return Outcome{Status: StatusScheduled, RunAt: w.Until, History: TaskSnooze}, w
}
