package embedded

import (
	"log/slog"
	"time"
)

// monitor performs the time-driven duties (delays falling due, lease
// timeouts, retention) when they fall due. It is event-driven, not polled:
// it sleeps until the earliest timer, and a transaction that arms an
// earlier timer wakes it to re-arm.
type monitor struct {
	monitorParams
	kick    chan struct{} // one slot: an earlier timer was armed
	done    chan struct{} // closed by shutdown
	stopped chan struct{} // closed when the goroutine has returned
}

// monitorParams is what the monitor needs from its store.
type monitorParams struct {
	// arm returns when the earliest timer fires (nanoseconds, 0: none)
	// and records that the monitor sleeps until then.
	arm func() int64
	// now is the store's clock, in nanoseconds.
	now func() int64
	// sweep performs the duties due now; ok is false once the store is
	// closing.
	sweep  func() (ok bool, err error)
	logger *slog.Logger
	// retryAfter is the pause after a failed sweep. Default 1 s.
	retryAfter time.Duration
}

func newMonitor(p monitorParams) *monitor {
	if p.retryAfter <= 0 {
		p.retryAfter = time.Second
	}
	return &monitor{monitorParams: p, kick: make(chan struct{}, 1), done: make(chan struct{}),
		stopped: make(chan struct{})}
}

func (m *monitor) start() { go m.run() }

// shutdown stops the monitor and waits until it has (a sweep in progress
// completes first).
func (m *monitor) shutdown() {
	close(m.done)
	<-m.stopped
}

// wake makes the monitor re-arm; it never blocks.
func (m *monitor) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *monitor) run() {
	defer close(m.stopped)
	tm := time.NewTimer(time.Hour)
	tm.Stop()
	for {
		next := m.arm()
		var c <-chan time.Time
		if next != 0 {
			d := time.Duration(next - m.now())
			if d <= 0 {
				ok, err := m.sweep()
				if !ok {
					return
				}
				if err != nil {
					m.logger.Error("embedded: monitor sweep failed", "err", err)
					select {
					case <-m.done:
						return
					case <-time.After(m.retryAfter):
					}
				}
				continue
			}
			tm.Reset(d)
			c = tm.C
		}
		select {
		case <-m.done:
			tm.Stop()
			return
		case <-m.kick:
			tm.Stop()
		case <-c:
		}
	}
}
