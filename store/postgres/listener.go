package postgres

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// listenerParams configures the listener duty.
type listenerParams struct {
	connCfg *pgx.ConnConfig
	channel string
	// dispatch handles one notification's payload.
	dispatch func(payload string)
	// lost runs when the session dropped, resumed when it listens again:
	// notifications in between were missed.
	lost, resumed func()
	logger        *slog.Logger
}

// listener is the background duty that keeps a dedicated session
// LISTENing on the store's channel: see run.
type listener struct {
	p     listenerParams
	ready chan error
	*duty
}

// startListener starts the listener duty and returns once it listens, or
// with the error of its first attempt, or when ctx ends.
func startListener(ctx context.Context, p listenerParams) (*listener, error) {
	l := &listener{p: p, ready: make(chan error, 1)}
	l.duty = startDuty(l.run)
	select {
	case err := <-l.ready:
		if err != nil {
			l.stop()
			return nil, err
		}
		return l, nil
	case <-ctx.Done():
		l.stop()
		return nil, ctx.Err()
	}
}

// run keeps a dedicated session LISTENing on the store's channel. Every
// notification is parsed into events for subscribers; a task becoming
// ready wakes long-polling claimers and a new delay wakes the monitor. When
// the session drops it reconnects with backoff; meanwhile claimers fall back
// to polling, and subscribers get EventLagged because events were missed.
func (l *listener) run(ctx context.Context) {
	ready := l.ready
	backoff := 50 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		err := l.listenOnce(ctx, func() {
			if first {
				ready <- nil
				first = false
			} else {
				// Whatever happened while we were away is unknown.
				l.p.resumed()
			}
			backoff = 50 * time.Millisecond
		})
		if ctx.Err() != nil {
			break
		}
		if first {
			ready <- err
			return
		}
		l.p.logger.Warn("norn: notification listener lost its connection; reconnecting", "err", err)
		l.p.lost()
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
	if first {
		ready <- ctx.Err()
	}
}

func (l *listener) listenOnce(ctx context.Context, up func()) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(cctx, l.p.connCfg)
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+quoteIdent(l.p.channel)); err != nil {
		return err
	}
	up()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		l.p.dispatch(n.Payload)
	}
}

// dispatch parses a payload of event lines (kind, id, queue, status,
// version, unix microseconds; tab-separated). A line without an id is a
// counted event whose version field is the count (eventsCTE).
func (s *Store) dispatch(payload string) {
	wakeClaim, wakeSweep := false, false
	switch payload {
	case "wake":
		s.wake.fire()
		return
	case "sched":
		s.sweepWake.fire()
		return
	}
	if rest, ok := strings.CutPrefix(payload, announcedWord+"\t"); ok {
		node, token, _ := strings.Cut(rest, "\t")
		if n, err := strconv.ParseUint(token, 10, 64); err == nil && node == s.node {
			s.subs.announced(n)
		}
		return
	}
	for _, line := range strings.Split(payload, "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 6 {
			continue
		}
		v, _ := strconv.ParseUint(f[4], 10, 64)
		us, _ := strconv.ParseInt(f[5], 10, 64)
		ev := norn.Event{Kind: norn.EventKind(f[0]), TaskID: f[1], Queue: f[2], Status: norn.Status(f[3]),
			Version: v, Time: time.UnixMicro(us).UTC()}
		if ev.TaskID == "" {
			if v == 0 {
				continue
			}
			ev.Version, ev.Count = 0, int(v)
		}
		if ev.Status == "deleted" {
			ev.Status = ""
		}
		switch ev.Status {
		case norn.StatusReady:
			wakeClaim = true
		case norn.StatusScheduled:
			wakeSweep = true
		}
		s.subs.publish(ev)
	}
	if wakeClaim {
		s.wake.fire()
	}
	if wakeSweep {
		s.sweepWake.fire()
	}
}
