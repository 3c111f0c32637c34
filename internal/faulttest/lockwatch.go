package faulttest

import (
	"context"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// LockWatch samples, straight from PostgreSQL, which node's session holds
// the monitor's leader lock. The leadership the checker reads from the
// nodes' logs is what the nodes believe; this is what the database says,
// so a takeover is judged twice, by two detectors that share nothing.
// Nodes are told apart by their sessions' application_name.
type LockWatch struct {
	mu      sync.Mutex
	samples []holdSample
	errs    int // samples that failed (the database restarting)
	stop    context.CancelFunc
	done    chan struct{}
}

// holdSample is one look at the lock: who held it at a moment.
type holdSample struct {
	at     time.Time
	holder string // application_name of the holding session; "" nobody
}

// leaderLockKey is the advisory lock key the Postgres store derives for
// the monitor leader of schema (FNV-1a of "norn-leader:" + schema). It is
// repeated here because the test watches the lock from outside the
// nodes; if the store's derivation changed, the watch would never see the
// lock held and CheckLockTakeovers says so.
func leaderLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("norn-leader:" + schema))
	return int64(h.Sum64())
}

// WatchLock starts sampling the leader lock of schema every interval on a
// connection of its own to dbURL (reconnecting after a database restart)
// until Stop.
func WatchLock(dbURL, schema string, every time.Duration) *LockWatch {
	ctx, cancel := context.WithCancel(context.Background())
	lw := &LockWatch{stop: cancel, done: make(chan struct{})}
	key := uint64(leaderLockKey(schema))
	go func() {
		defer close(lw.done)
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if conn == nil {
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				conn, _ = pgx.Connect(cctx, dbURL)
				ccancel()
			}
			if conn != nil {
				qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
				var holder string
				err := conn.QueryRow(qctx, `SELECT coalesce((SELECT a.application_name FROM pg_locks l
	JOIN pg_stat_activity a ON a.pid = l.pid
	WHERE l.locktype = 'advisory' AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 1 AND l.granted), '')`,
					int64(uint32(key>>32)), int64(uint32(key))).Scan(&holder)
				at := time.Now()
				qcancel()
				lw.mu.Lock()
				if err == nil {
					lw.samples = append(lw.samples, holdSample{at: at, holder: holder})
				} else {
					lw.errs++
				}
				lw.mu.Unlock()
				if err != nil {
					conn.Close(context.Background())
					conn = nil
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return lw
}

// Stop ends the sampling.
func (lw *LockWatch) Stop() {
	lw.stop()
	<-lw.done
}

func (lw *LockWatch) snapshot() []holdSample {
	lw.mu.Lock()
	defer lw.mu.Unlock()
	return append([]holdSample(nil), lw.samples...)
}

// LockReport is what CheckLockTakeovers found.
type LockReport struct {
	Samples, Failed int
	Holders         int             // holding terms seen (a change of holder starts one)
	Takeovers       []time.Duration // leader stopped or killed → the database shows another node holding the lock
	Problems        []string
}

// CheckLockTakeovers checks, from the database's side, that whenever the
// monitor leader was frozen or killed (events), the lock was held by
// another node before the fault ended. It is the same promise as
// CheckMonitor's takeover check, judged without the nodes' logs.
func CheckLockTakeovers(lw *LockWatch, events []Event) *LockReport {
	ss := lw.snapshot()
	lw.mu.Lock()
	r := &LockReport{Samples: len(ss), Failed: lw.errs}
	lw.mu.Unlock()
	prev := ""
	for _, s := range ss {
		if s.holder != "" && s.holder != prev {
			r.Holders++
		}
		prev = s.holder
	}
	if r.Holders == 0 {
		r.Problems = append(r.Problems, fmt.Sprintf("the database never showed the leader lock held in %d samples: the watch looks for the wrong lock", len(ss)))
		return r
	}
	ts := func(t time.Time) string { return t.Format("15:04:05.000") }
	for _, e := range events {
		name, ok := strings.CutSuffix(e.Target, " (leader)")
		if !ok || e.Err != nil || (e.Fault != "pause" && e.Fault != "kill") {
			continue
		}
		var seen []string // the holders sampled during the fault, in order
		took := time.Time{}
		for _, s := range ss {
			if s.at.Before(e.Start) || s.at.After(e.Healed) {
				continue
			}
			if len(seen) == 0 || seen[len(seen)-1] != s.holder {
				seen = append(seen, s.holder)
			}
			if took.IsZero() && s.holder != "" && s.holder != name {
				took = s.at
			}
		}
		if took.IsZero() {
			if len(seen) == 0 {
				seen = []string{"no sample"}
			}
			for i, h := range seen {
				if h == "" {
					seen[i] = "nobody"
				}
			}
			r.Problems = append(r.Problems, fmt.Sprintf("%s of %s %s–%s: no other node held the leader lock meanwhile (the database showed %s)",
				e.Fault, name, ts(e.Start), ts(e.Healed), strings.Join(seen, " → ")))
			continue
		}
		r.Takeovers = append(r.Takeovers, took.Sub(e.Start))
	}
	return r
}
