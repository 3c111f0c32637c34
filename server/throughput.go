package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// The throughput history behind GET /v1/stats/throughput and the
// dashboard's chart: per queue and per minute, counted from the store's
// event stream, kept in memory in fixed-size rings.
//
// Memory is bounded: a ring is throughputMinutes buckets of 16 bytes
// (22.5 KiB); there is one for all queues together and at most
// throughputMaxQueues per-queue rings (about 11.3 MiB in all, reached only
// with that many busy queues). A queue beyond the limit is counted in the
// total but has no history of its own until a queue idle for the whole
// window gives its ring up.
//
// The events come from the store, not from this server's requests, so on
// PostgreSQL (whose events travel by NOTIFY to every node) each node counts
// the whole cluster's activity. A store that keeps history
// (norn.ThroughputStore; both of Norn's do) gets the closed minutes from
// throughputkeeper.go, and reads older than what memory holds, or from
// before a restart, come from it (storedHistory).

const (
	throughputMinutes   = int(norn.ThroughputWindow / time.Minute)
	throughputMaxQueues = 512
)

// throughputSeries indexes the counters of a bucket.
const (
	seriesSubmitted = iota
	seriesCompleted
	seriesFailed
	seriesCount
)

// seriesOf maps an event kind to the counter it increments, or -1. These
// are the kinds the dashboard's chart has always drawn.
func seriesOf(k norn.EventKind) int {
	switch k {
	case norn.EventSubmitted:
		return seriesSubmitted
	case norn.EventKind(norn.TaskComplete):
		return seriesCompleted
	case norn.EventKind(norn.TaskRetry), norn.EventKind(norn.TaskTimeout), norn.EventKind(norn.TaskAbort), norn.EventExpired:
		return seriesFailed
	}
	return -1
}

// bucket is one minute of one ring. minute is Unix minutes (fits uint32
// until the year 10136); a slot whose minute differs from the one asked
// for holds an older minute and reads as zero.
type bucket struct {
	minute uint32
	n      [seriesCount]uint32
}

// ring is a queue's last throughputMinutes minutes, indexed by minute
// modulo its length.
type ring struct {
	b    [throughputMinutes]bucket
	last uint32 // latest minute counted
}

func (r *ring) add(minute uint32, series int, n int) {
	slot := &r.b[minute%uint32(throughputMinutes)]
	if slot.minute != minute {
		if slot.minute > minute {
			return // older than what the slot holds: out of the window
		}
		*slot = bucket{minute: minute}
	}
	slot.n[series] = uint32(min(uint64(slot.n[series])+uint64(n), uint64(^uint32(0))))
	if minute > r.last {
		r.last = minute
	}
}

// sumInto adds the counts of minutes [from, to] to acc (acc[i] is minute from+i).
func (r *ring) sumInto(acc [][seriesCount]int64, from uint32) {
	for i := range acc {
		m := from + uint32(i)
		b := &r.b[m%uint32(throughputMinutes)]
		if b.minute == m {
			for s := range seriesCount {
				acc[i][s] += int64(b.n[s])
			}
		}
	}
}

// throughput is the recorder. now is injected for tests.
type throughput struct {
	now   func() time.Time
	start time.Time

	mu     sync.Mutex
	total  ring
	queues map[string]*ring
}

func newThroughput(now func() time.Time) *throughput {
	return &throughput{now: now, start: now().UTC(), queues: map[string]*ring{}}
}

func unixMinute(t time.Time) uint32 { return uint32(t.Unix() / 60) }

// observe counts an event. It is bucketed by the event's own time, which
// the store sets (on PostgreSQL the database's clock, the same for every
// node), unless that is missing or not within the window up to now, when
// the recorder's clock stands in for it.
func (tp *throughput) observe(e norn.Event) {
	s := seriesOf(e.Kind)
	if s < 0 {
		return
	}
	now := tp.now()
	at := e.Time
	if at.IsZero() || at.After(now) || !at.After(now.Add(-norn.ThroughputWindow)) {
		at = now
	}
	m := unixMinute(at)
	tp.mu.Lock()
	defer tp.mu.Unlock()
	n := e.Tasks()
	tp.total.add(m, s, n)
	r := tp.queues[e.Queue]
	if r == nil {
		r = tp.claimRing(m)
		if r == nil {
			return
		}
		tp.queues[e.Queue] = r
	}
	r.add(m, s, n)
}

// claimRing returns a fresh ring, or one given up by a queue idle for the
// whole window, or nil when every ring is in use.
func (tp *throughput) claimRing(now uint32) *ring {
	if len(tp.queues) < throughputMaxQueues {
		return new(ring)
	}
	for q, r := range tp.queues {
		if now-r.last >= uint32(throughputMinutes) {
			delete(tp.queues, q)
			*r = ring{}
			return r
		}
	}
	return nil
}

// window is the minutes a history from since covers, up to now: clamped to
// the memory's window (a time ahead of now means the minute under way).
func (tp *throughput) window(since, now time.Time, keep time.Duration) (from, to uint32) {
	to = unixMinute(now)
	from = to - uint32(keep/time.Minute) + 1
	if since.After(now) {
		from = to
	} else if since.After(minuteTime(from)) {
		from = unixMinute(since)
	}
	return from, to
}

// counts returns the memory's counts of minutes [from, to] for the queues
// (nil: all together): acc[i] is minute from+i. Minutes before the
// memory's window read as zero.
func (tp *throughput) counts(queues []string, from, to uint32) [][seriesCount]int64 {
	acc := make([][seriesCount]int64, to-from+1)
	lo := from
	if oldest := to - uint32(throughputMinutes) + 1; lo < oldest {
		lo = oldest
	}
	if lo > to {
		return acc
	}
	part := acc[lo-from:]
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if queues == nil {
		tp.total.sumInto(part, lo)
		return acc
	}
	for _, q := range queues {
		if r := tp.queues[q]; r != nil {
			r.sumInto(part, lo)
		}
	}
	return acc
}

// history answers from memory alone: the minutes from since (clamped to
// the window) to now for the given queues (nil: all of them).
func (tp *throughput) history(queues []string, since time.Time) norn.Throughput {
	now := tp.now()
	from, to := tp.window(since, now, norn.ThroughputWindow)
	acc := tp.counts(queues, from, to)
	out := norn.Throughput{Queues: queues, Since: minuteTime(from), Until: minuteTime(to),
		Step: norn.Duration(time.Minute), RecordingSince: tp.start, Points: []norn.ThroughputPoint{}}
	for i, c := range acc {
		if c != [seriesCount]int64{} {
			out.Points = append(out.Points, point(minuteTime(from+uint32(i)), c))
		}
	}
	return out
}

func point(at time.Time, c [seriesCount]int64) norn.ThroughputPoint {
	return norn.ThroughputPoint{Minute: at, Submitted: c[seriesSubmitted], Completed: c[seriesCompleted], Failed: c[seriesFailed]}
}

func minuteTime(m uint32) time.Time { return time.Unix(int64(m)*60, 0).UTC() }

// follow counts the store's events until ctx ends, resubscribing after a
// failure; sub is the first subscription, opened by the caller so that no
// event after New returns is missed.
func (tp *throughput) follow(ctx context.Context, store norn.Store, sub norn.EventStream, log *slog.Logger) {
	var lastLag time.Time
	for ctx.Err() == nil {
		var err error
		if sub == nil {
			sub, err = store.Subscribe(ctx, norn.EventFilter{Counts: true})
		}
		if err == nil {
			for sub.Next() {
				e := sub.Item()
				if e.Kind == norn.EventLagged && time.Since(lastLag) > time.Minute {
					lastLag = time.Now()
					log.Warn("throughput history: the event stream fell behind; some events are not counted")
				}
				tp.observe(e)
			}
			err = sub.Err()
			_ = sub.Close()
			sub = nil
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Warn("throughput history: event subscription failed; events are not counted until it recovers", slog.Any("error", err))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (s *Server) handleThroughput(w http.ResponseWriter, r *http.Request) error {
	queues, since, err := wire.ParseThroughputParams(r.URL.Query(), s.tp.now())
	if err != nil {
		return err
	}
	p := principalFrom(r.Context())
	if queues, err = p.scopeQueues(queues); err != nil {
		return err
	}
	ts, ok := s.store.(norn.ThroughputStore)
	if !ok {
		writeJSON(w, http.StatusOK, s.tp.history(queues, since))
		return nil
	}
	h, err := storedHistory(r.Context(), s.tp, ts, queues, since)
	return reply(w, h, err)
}
