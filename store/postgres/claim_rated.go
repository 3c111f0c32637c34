package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nornq/norn"
)

// The rated path: a rate-limited queue's claim on the shared path's locks
// and verdict, its tokens taken inside the lease claim (ratelimit.go has
// the bucket and why no token is spent twice).

// ratedLeaseN replaces the lease claim's first CTE (assignSQL's n) in
// ratedLeaseSQL: the bucket, locked for the claim's transaction (b0), the
// queue's rate (q), the bucket refilled to the claim's time (f: the
// database's clock or $3, or the bucket's time if that is later, as
// norn.RateLimit.Take does), the tokens the claim may use (tk: up to $2, none
// without a bucket or unless the verdict is ok), and n with the bucket's
// time as the claim's.
var ratedLeaseN = `WITH b0 AS (SELECT x.tokens, x.at FROM {s}.queue_buckets x
	WHERE x.queue = $1 AND current_setting('norn.flow_shared', true) = 'ok' FOR UPDATE),
q AS (SELECT rate_per_second, ` + bucketBurstSQL + `::float8 AS burst FROM {s}.queues WHERE name = $1 AND rate_per_second > 0),
c0 AS (SELECT coalesce($3::timestamptz, clock_timestamp()) AS now),
f AS (SELECT greatest(b0.at, c0.now) AS at, least(b0.tokens + greatest(extract(epoch FROM c0.now - b0.at)::float8, 0)
	* q.rate_per_second, q.burst) AS r FROM b0, q, c0),
tk AS (SELECT coalesce((SELECT least($2, CASE WHEN f.r <= 0 THEN 0 ELSE floor(f.r + ` + tokenEpsilonSQL + `) END)::int FROM f), 0) AS g),
n AS (SELECT f.at AS now, 'ready'::text AS ready FROM f),`

// ratedLeaseSQL is the plain lease claim (buildLeaseClaimSQL) of a
// rate-limited queue on the shared path's verdict, taking its tokens in
// the same statement: it claims at most the whole tokens the bucket holds
// at the claim's time, takes from the bucket exactly what it claimed (bu)
// and notes how many it could have (norn.rated_g). The bucket's row stays
// locked to the claim's commit, so rate-limited claims of a queue follow
// one another through that one statement; none takes tokens it does not
// use, so none gives any back: a give-back after a refill is unsound (the
// refill may have lost those tokens to the cap, and giving them back would
// let claims exceed burst + rate × window).
func (s *Store) buildRatedLeaseSQL() string {
	sql := s.buildLeaseClaimSQL(`current_setting('norn.flow_shared', true) = 'ok'`)
	const n = `WITH n AS (SELECT coalesce($3::timestamptz, clock_timestamp()) AS now, 'ready'::text AS ready),`
	if !strings.HasPrefix(sql, s.q(n)) {
		panic("ratedLeaseSQL: the lease claim no longer starts with n")
	}
	sql = strings.ReplaceAll(sql[len(s.q(n)):], "$2", "(SELECT tk.g FROM tk)")
	sql = s.q(ratedLeaseN) + sql
	const tail = "SELECT upd.* FROM upd WHERE (SELECT count(*) FROM nt) >= 0"
	if !strings.Contains(sql, tail) {
		panic("ratedLeaseSQL: the lease claim no longer ends as assignSQL does")
	}
	return strings.Replace(sql, tail, s.q(`, bu AS (UPDATE {s}.queue_buckets x SET at = f.at,
	tokens = CASE WHEN k.n > 0 AND f.r - k.n < `+tokenEpsilonSQL+` THEN 0 ELSE f.r - k.n END
	FROM f, (SELECT count(*) AS n FROM pick) k WHERE x.queue = $1),
rm AS (SELECT set_config('norn.rated_g', (SELECT tk.g FROM tk)::text, true) AS v)
`)+tail+" AND (SELECT count(*) FROM rm) >= 0", 1)
}

// ratedAfterSQL reads, after a ratedLeaseSQL claim in its transaction,
// the tokens it could have used, the bucket as it left it and the rate
// limit.
const ratedAfterSQL = `SELECT coalesce(nullif(current_setting('norn.rated_g', true), ''), '0')::int, b.tokens, b.at,
	q.rate_per_second, q.rate_burst FROM {s}.queues q LEFT JOIN {s}.queue_buckets b ON b.queue = q.name WHERE q.name = $1`

// claimRated claims up to want tasks of a rate-limited queue that is not
// fair and not paused: the shared path's locks and verdict, then
// ratedLeaseSQL, which takes the tokens in the claim, in one round trip,
// so claims of the queue run concurrently on every node. done false:
// the queue has no rate limit now, or the shared path is ruled out; the
// caller claims on the exclusive path.
func (s *Store) claimRated(ctx context.Context, conn *pgx.Conn, c claimCall) (out []*norn.Task, done bool, err error) {
	slots, cap := s.flow.margins()
	c.want = min(c.want, cap)
	s.flow.sqlOnce.Do(s.buildFlowSQL)
	readyRows := s.readyRows.get(c.queue)
	var (
		verdict string
		g       int
		rl      norn.RateLimit
		burst   int32
		tok     *float64
		at      *time.Time
	)
	b := &pgx.Batch{}
	b.Queue(sharedLockSQL, s.channel+"/flow/"+c.queue, s.channel+"/flowslot/"+c.queue, slots)
	b.Queue(s.q(sharedVerdictSQL), c.queue, slots*cap, true, int64(c.want)).QueryRow(func(row pgx.Row) (err error) {
		verdict, _, err = scanVerdict(row)
		return err
	})
	b.Queue(s.q(bucketInitSQL), c.queue, s.clockNow())
	b.Queue(s.flow.ratedLeaseSQL, c.queue, c.want, s.clockNow(), c.worker, c.timeout, s.cfg.HistoryLimit, readyRows).Query(func(rows pgx.Rows) (err error) {
		out, _, err = collectClaimed(rows)
		return err
	})
	b.Queue(s.q(ratedAfterSQL), c.queue).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&g, &tok, &at, &rl.PerSecond, &burst); err != pgx.ErrNoRows {
			return err
		}
		return nil
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, false, err
	}
	rl.Burst = int(burst)
	if rl.PerSecond <= 0 {
		// No rate limit now: the node learns it and claims as the
		// settings say.
		s.flow.mark(&s.flow.rated, c.queue, false)
		return nil, false, nil
	}
	if verdict != sharedOK {
		if verdict == sharedStatic || verdict == sharedKeyed {
			// Small key limits with a rate limit: claims take their
			// tokens and admit per key exactly, one at a time.
			s.flow.mark(&s.flow.exclusive, c.queue, true)
		}
		return nil, false, nil
	}
	if len(out) < c.want {
		readyRows = min(readyRows*4, maxReadyRows)
	}
	s.readyRows.set(c.queue, readyRows, len(out) == c.want)
	if len(out) < c.want && len(out) == g {
		// Short by the rate limit: count what it held back.
		var bk norn.Bucket
		if tok != nil && at != nil {
			bk = norn.Bucket{Tokens: *tok, At: *at}
		}
		var left int
		if err := conn.QueryRow(ctx, s.q(leftSQL), c.queue, c.want-len(out)).Scan(&left); err != nil {
			return out, true, nil
		}
		s.noteHeld(c.queue, norn.QueueFlow{RateLimit: rl}, bk, c.want, len(out), left, -1, g)
	}
	return out, true, nil
}
