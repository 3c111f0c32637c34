package embedded

import (
	"time"
)

// syncer makes opportunistic writes durable shortly after they are
// applied: a write nudges it, and it syncs the WAL at most interval later,
// so a burst of writes shares one sync.
type syncer struct {
	syncerParams
	nudged  chan struct{} // one slot: something was written since the last sync
	done    chan struct{} // closed by shutdown
	stopped chan struct{} // closed when the goroutine has returned
}

// syncerParams is what the syncer needs from its store.
type syncerParams struct {
	// interval bounds how long an acknowledged write stays unsynced.
	interval time.Duration
	// sync syncs the WAL unless the store already stopped writes; its
	// error stops them.
	sync func() error
}

func newSyncer(p syncerParams) *syncer {
	return &syncer{syncerParams: p, nudged: make(chan struct{}, 1), done: make(chan struct{}),
		stopped: make(chan struct{})}
}

func (y *syncer) start() { go y.run() }

// shutdown stops the syncer and waits until it has. What it had not synced
// yet is left to the caller (Close syncs once more).
func (y *syncer) shutdown() {
	close(y.done)
	<-y.stopped
}

// nudge tells the syncer that a write is waiting for its sync; it never
// blocks.
func (y *syncer) nudge() {
	select {
	case y.nudged <- struct{}{}:
	default:
	}
}

func (y *syncer) run() {
	defer close(y.stopped)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		select {
		case <-y.done:
			return
		case <-y.nudged:
		}
		t.Reset(y.interval)
		select {
		case <-y.done:
			t.Stop()
			return
		case <-t.C:
		}
		_ = y.sync()
	}
}
