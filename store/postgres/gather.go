package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// gathered decides whether a batch claim (norn.ClaimRequest.Min) takes
// tasks now: it counts, up to Min, the ready tasks of the claim's queues
// that are not paused (in task rows and in ready rows) and finds when the
// one ready longest became ready. Both reads stop after Min rows, so a
// backlog costs no more than a short one. When the claim waits, retry is
// when the oldest task's linger ends (zero: only new tasks change it).
func (s *Store) gathered(ctx context.Context, req *norn.ClaimRequest) (take bool, retry time.Time, err error) {
	if req.Min <= 1 {
		return true, time.Time{}, nil
	}
	var now time.Time
	var ready int
	var oldest *time.Time
	err = s.withConn(ctx, func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, s.q(`WITH open AS (SELECT q FROM unnest($1::text[]) q
	WHERE NOT EXISTS (SELECT 1 FROM {s}.queues WHERE name = q AND paused)),
x AS ((SELECT t.ready_at, 1 AS n FROM {s}.tasks t WHERE t.queue IN (SELECT q FROM open) AND t.ist = 'ready' LIMIT $2)
	UNION ALL (SELECT r.ready_at, cardinality(r.ids) FROM {s}.ready r WHERE r.queue IN (SELECT q FROM open) LIMIT $2))
SELECT clock_timestamp(), coalesce(sum(n), 0)::int, min(ready_at) FROM x`), req.Queues, req.Min).Scan(&now, &ready, &oldest)
	})
	if err != nil {
		return false, time.Time{}, err
	}
	if c := s.clockNow(); c != nil {
		now = *c
	}
	var o time.Time
	if oldest != nil {
		o = *oldest
	}
	take, retry = req.Gathered(ready, o, now)
	return take, retry, nil
}
