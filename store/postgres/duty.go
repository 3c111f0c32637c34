package postgres

import "context"

// duty is one of the store's background jobs — the monitor, the
// notification listener, the subscriber announcement — each in its own file
// with a params struct, started by its start function and ended by stop.
type duty struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startDuty runs run in a goroutine until stop cancels its context.
func startDuty(run func(ctx context.Context)) *duty {
	ctx, cancel := context.WithCancel(context.Background())
	d := &duty{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		run(ctx)
	}()
	return d
}

// stop ends the duty and waits until it has.
func (d *duty) stop() {
	d.cancel()
	<-d.done
}
