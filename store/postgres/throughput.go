package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Throughput history (norn.ThroughputStore) in {s}.throughput: one row per
// queue, step and step start. Every node writes the minutes it counted;
// GREATEST keeps the larger count, so the nodes' writes agree.

// SaveThroughput stores minutes, keeping the larger of each count.
func (s *Store) SaveThroughput(ctx context.Context, recs []norn.ThroughputRecord) error {
	if err := norn.ValidateThroughput(recs); err != nil {
		return err
	}
	if len(recs) == 0 {
		return nil
	}
	n := len(recs)
	queues, ats := make([]string, n), make([]time.Time, n)
	sub, comp, fail := make([]int64, n), make([]int64, n), make([]int64, n)
	for i, r := range recs {
		queues[i], ats[i] = r.Queue, r.At
		sub[i], comp[i], fail[i] = r.Submitted, r.Completed, r.Failed
	}
	// GROUP BY: one row per key even when recs repeat a minute, which ON
	// CONFLICT could not touch twice in one statement.
	return s.withConn(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, s.q(`INSERT INTO {s}.throughput AS t (queue, step, at, submitted, completed, failed)
SELECT queue, 60, at, max(submitted), max(completed), max(failed)
FROM unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::bigint[], $5::bigint[]) AS r(queue, at, submitted, completed, failed)
GROUP BY queue, at
ON CONFLICT (queue, step, at) DO UPDATE SET
	submitted = GREATEST(t.submitted, excluded.submitted),
	completed = GREATEST(t.completed, excluded.completed),
	failed = GREATEST(t.failed, excluded.failed)`), queues, ats, sub, comp, fail)
		return err
	})
}

// LoadThroughput returns the stored steps of queues in [since, until).
func (s *Store) LoadThroughput(ctx context.Context, queues []string, since, until time.Time) ([]norn.ThroughputRecord, error) {
	var out []norn.ThroughputRecord
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		rows, err := conn.Query(ctx, s.q(`SELECT queue, step, at, submitted, completed, failed FROM {s}.throughput
WHERE ($1::text[] IS NULL OR queue = ANY($1)) AND at >= $2 AND at < $3
ORDER BY queue COLLATE "C", step, at`), queues, since, until)
		if err != nil {
			return err
		}
		out = out[:0]
		var r norn.ThroughputRecord
		var step int
		_, err = pgx.ForEachRow(rows, []any{&r.Queue, &step, &r.At, &r.Submitted, &r.Completed, &r.Failed}, func() error {
			r.Step, r.At = time.Duration(step)*time.Second, r.At.UTC()
			out = append(out, r)
			return nil
		})
		return err
	})
	return out, err
}

// CompactThroughput sums old minutes into hours and drops old hours, in
// one statement: the minutes a concurrent compaction deleted first are not
// seen here, so each minute is counted once.
func (s *Store) CompactThroughput(ctx context.Context, minuteBefore, hourBefore time.Time) error {
	return s.withConn(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, s.q(`WITH old AS (
	DELETE FROM {s}.throughput WHERE step = 60 AND at < $1
	RETURNING queue, to_timestamp(floor(extract(epoch FROM at) / 3600) * 3600) AS hour, submitted, completed, failed
), hours AS (
	INSERT INTO {s}.throughput AS t (queue, step, at, submitted, completed, failed)
	SELECT queue, 3600, hour, sum(submitted), sum(completed), sum(failed) FROM old
	WHERE hour >= $2 GROUP BY queue, hour HAVING sum(submitted) + sum(completed) + sum(failed) > 0
	ON CONFLICT (queue, step, at) DO UPDATE SET
		submitted = t.submitted + excluded.submitted,
		completed = t.completed + excluded.completed,
		failed = t.failed + excluded.failed
)
DELETE FROM {s}.throughput WHERE step = 3600 AND at < $2`), minuteBefore, hourBefore)
		return err
	})
}

var _ norn.ThroughputStore = (*Store)(nil)
