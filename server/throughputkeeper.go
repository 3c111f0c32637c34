package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/nornq/norn"
)

// The throughput keeper: writes the recorder's closed minutes to a store
// that keeps history (norn.ThroughputStore) and compacts that history, so
// the chart survives restarts and every node of a cluster reads the same.

const (
	// keepEvery is how often the keeper writes; each write repeats the
	// last keepRewrite minutes, so events that arrive late (NOTIFY lag, a
	// slow subscriber) still reach the store. Saves keep the larger count,
	// so repeating is harmless.
	keepEvery   = time.Minute
	keepRewrite = 5
	// compactEvery is how often old minutes are summed into hours.
	compactEvery = time.Hour
)

// records returns the memory's counts of minutes [from, to] as store
// records: the total (queue "") for every minute, so a stored minute of
// zeros says "recorded, idle" and a missing one "not recorded"; each queue
// only where it counted something.
func (tp *throughput) records(from, to uint32) []norn.ThroughputRecord {
	var out []norn.ThroughputRecord
	add := func(q string, r *ring, always bool) {
		acc := make([][seriesCount]int64, to-from+1)
		r.sumInto(acc, from)
		for i, c := range acc {
			if always || c != [seriesCount]int64{} {
				p := point(minuteTime(from+uint32(i)), c)
				out = append(out, norn.ThroughputRecord{Queue: q, Step: time.Minute, At: p.Minute,
					Submitted: p.Submitted, Completed: p.Completed, Failed: p.Failed})
			}
		}
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if start := unixMinute(tp.start); from < start {
		from = start // minutes before this server started are not its to write
	}
	if from > to {
		return nil
	}
	add("", &tp.total, true)
	for q, r := range tp.queues {
		add(q, r, false)
	}
	return out
}

// save writes the last keepRewrite closed minutes, and the minute under
// way as well when final (at shutdown).
func (tp *throughput) save(ctx context.Context, ts norn.ThroughputStore, final bool) error {
	now := unixMinute(tp.now())
	to := now - 1
	if final {
		to = now
	}
	recs := tp.records(now-keepRewrite, to)
	if len(recs) == 0 {
		return nil
	}
	return ts.SaveThroughput(ctx, recs)
}

// compact sums minutes older than norn.ThroughputKeep into hours and drops
// hours older than norn.ThroughputKeepHourly.
func (tp *throughput) compact(ctx context.Context, ts norn.ThroughputStore) error {
	now := tp.now().UTC()
	return ts.CompactThroughput(ctx, now.Add(-norn.ThroughputKeep).Truncate(time.Minute), now.Add(-norn.ThroughputKeepHourly).Truncate(time.Hour))
}

// keep runs the keeper until ctx ends, then writes what it has (with its
// own short deadline: ctx is already done).
func (tp *throughput) keep(ctx context.Context, ts norn.ThroughputStore, log *slog.Logger) {
	save := time.NewTicker(keepEvery)
	defer save.Stop()
	nextCompact := time.Now()
	for {
		if time.Now().After(nextCompact) {
			if err := tp.compact(ctx, ts); err != nil && ctx.Err() == nil {
				log.Warn("throughput history: compaction failed; retrying in an hour", slog.Any("error", err))
			}
			nextCompact = time.Now().Add(compactEvery)
		}
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.save(fctx, ts, true); err != nil {
				log.Warn("throughput history: the last minutes could not be written", slog.Any("error", err))
			}
			return
		case <-save.C:
			if err := tp.save(ctx, ts, false); err != nil && ctx.Err() == nil {
				log.Warn("throughput history: writing closed minutes failed; they are written again at the next minute", slog.Any("error", err))
			}
		}
	}
}

// storedHistory answers GET /v1/stats/throughput from the store's history
// and the memory: per queue and minute the larger of the two counts (the
// memory holds the minute under way and what the keeper has not written
// yet; the store what came before this server). Points are hours when
// since is more than norn.ThroughputKeep ago.
func storedHistory(ctx context.Context, tp *throughput, ts norn.ThroughputStore, queues []string, since time.Time) (norn.Throughput, error) {
	now := tp.now().UTC()
	step := time.Minute
	if since.Before(now.Add(-norn.ThroughputKeep)) {
		step = time.Hour
	}
	from, to := tp.window(since, now, norn.ThroughputKeepHourly)
	if step == time.Hour {
		from = unixMinute(minuteTime(from).Truncate(time.Hour))
	}
	names := queues
	if names == nil {
		names = []string{""}
	}
	recs, err := ts.LoadThroughput(ctx, append([]string{""}, names...), minuteTime(from), minuteTime(to+1))
	if err != nil {
		return norn.Throughput{}, err
	}
	out := norn.Throughput{Queues: queues, Since: minuteTime(from), Until: minuteTime(to), Step: norn.Duration(step),
		RecordingSince: tp.start, Points: []norn.ThroughputPoint{}}
	// Minutes per queue: stored, then the memory's where larger.
	stored := map[string]map[uint32]norn.ThroughputRecord{}
	hours := map[uint32]norn.ThroughputRecord{}
	for _, r := range recs {
		if r.Queue == "" && r.At.Before(out.RecordingSince) {
			out.RecordingSince = r.At
		}
		if (r.Queue == "") != (queues == nil) {
			continue
		}
		if r.Step == time.Hour {
			if step == time.Hour {
				h := hours[unixMinute(r.At)]
				h.Add(r)
				hours[unixMinute(r.At)] = h
			}
			continue
		}
		if stored[r.Queue] == nil {
			stored[r.Queue] = map[uint32]norn.ThroughputRecord{}
		}
		stored[r.Queue][unixMinute(r.At)] = r
	}
	buckets := map[uint32]norn.ThroughputRecord{}
	bucket := func(m uint32, r norn.ThroughputRecord) {
		if step == time.Hour {
			m = unixMinute(minuteTime(m).Truncate(time.Hour))
		}
		acc := buckets[m]
		acc.Add(r)
		buckets[m] = acc
	}
	// The memory reaches back norn.ThroughputWindow at most.
	memFrom := max(from, to-uint32(throughputMinutes)+1)
	for _, q := range names {
		qs := []string{q}
		if q == "" {
			qs = nil
		}
		minutes := stored[q]
		for i, c := range tp.counts(qs, memFrom, to) {
			m := memFrom + uint32(i)
			r := minutes[m]
			delete(minutes, m)
			p := point(minuteTime(m), c)
			r.Max(norn.ThroughputRecord{Submitted: p.Submitted, Completed: p.Completed, Failed: p.Failed})
			bucket(m, r)
		}
		for m, r := range minutes {
			bucket(m, r)
		}
	}
	for b, h := range hours {
		acc := buckets[b]
		acc.Add(h)
		buckets[b] = acc
	}
	for m := from; m <= to; m += uint32(step / time.Minute) {
		if r := buckets[m]; !r.Zero() {
			out.Points = append(out.Points, norn.ThroughputPoint{Minute: minuteTime(m), Submitted: r.Submitted, Completed: r.Completed, Failed: r.Failed})
		}
	}
	return out, nil
}
