package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Per-key rate limits (norn.QueueFlow.KeyRateLimit, a key's own
// KeySettings.RateLimit). A queue with any is key_rated, hence
// flow_limited, and its claims take the exclusive path (the shared
// verdict answers static for it): under the queue's gate, held
// exclusively, a claim reads the buckets of the queue's keys (key_buckets:
// a row per key whose bucket is not full), admits per key no more tasks
// than its bucket pays for at the database's time, and writes the buckets
// of the keys it took from before it commits. One claim of the queue at a
// time, on any node, so no token is spent twice. A read costs O(keys
// claimed from within the last burst ÷ rate), since the sweep deletes the
// rows that refilled to their burst (the same as none).

// keyTokens is an exclusive claim's view of its queue's key buckets: how
// many tasks each key may still start in this claim.
type keyTokens struct {
	flow    norn.QueueFlow
	own     map[string]*norn.KeySettings
	buckets map[string]norn.Bucket // as stored (absent: full)
	now     time.Time
	left    map[string]int64 // whole tokens left per key read so far
	taken   map[string]int
}

// room is how many more tasks of key its bucket pays for (-1: the key has
// no rate limit). A nil keyTokens limits nothing.
func (k *keyTokens) room(key string) int64 {
	if k == nil {
		return -1
	}
	if n, ok := k.left[key]; ok {
		return n
	}
	rl := k.flow.KeyRateFor(key, k.own[key])
	if rl.PerSecond <= 0 {
		k.left[key] = -1
		return -1
	}
	b, ok := k.buckets[key]
	if !ok {
		b = rl.FullBucket(k.now)
	}
	n := int64(rl.Refill(b, k.now).Whole())
	k.left[key] = n
	return n
}

// take notes a task of key taken by the pick.
func (k *keyTokens) take(key string) {
	if k == nil || k.room(key) < 0 {
		return
	}
	k.left[key]--
	k.taken[key]++
}

// defaultRoom is the room of a key with neither a bucket nor settings of
// its own (-1: none).
func (k *keyTokens) defaultRoom() int64 {
	if k == nil || k.flow.KeyRateLimit.PerSecond <= 0 {
		return -1
	}
	return int64(k.flow.KeyRateLimit.Normalized().Burst)
}

// queueWrites adds to b the upsert of the buckets of the keys the pick took
// from. A row whose time is later than the claim's (a key held back by a
// snooze) stays as it is.
func (k *keyTokens) queueWrites(s *Store, b *pgx.Batch, queue string) {
	if k == nil || len(k.taken) == 0 {
		return
	}
	var keys []string
	var tokens []float64
	var at []time.Time
	for key, n := range k.taken {
		rl := k.flow.KeyRateFor(key, k.own[key])
		bk, ok := k.buckets[key]
		if !ok {
			bk = rl.FullBucket(k.now)
		}
		_, bk = rl.Take(bk, k.now, n)
		keys, tokens, at = append(keys, key), append(tokens, bk.Tokens), append(at, bk.At)
	}
	b.Queue(s.q(`INSERT INTO {s}.key_buckets AS b (queue, key, tokens, at)
SELECT $1, u.k, u.t, u.a FROM unnest($2::text[], $3::float8[], $4::timestamptz[]) u(k, t, a)
ON CONFLICT (queue, key) DO UPDATE SET tokens = EXCLUDED.tokens, at = EXCLUDED.at WHERE b.at <= EXCLUDED.at`),
		queue, keys, tokens, at)
}

// readKeyBuckets adds to the gate's reads those of a key-rated queue's
// buckets (nothing for other queues: the statement finds no row).
func (s *Store) readKeyBuckets(b *pgx.Batch, queue string, g *gateView) {
	b.Queue(s.q(`SELECT b.key, b.tokens, b.at FROM {s}.key_buckets b
WHERE b.queue = $1 AND (SELECT q.key_rated FROM {s}.queues q WHERE q.name = $1)`), queue).Query(func(rows pgx.Rows) error {
		var key string
		var bk norn.Bucket
		_, err := pgx.ForEachRow(rows, []any{&key, &bk.Tokens, &bk.At}, func() error {
			if g.keyBuckets == nil {
				g.keyBuckets = map[string]norn.Bucket{}
			}
			g.keyBuckets[key] = bk
			return nil
		})
		return err
	})
}

// tokensFor returns the claim's key tokens, nil when no key of the queue
// has a rate limit.
func (g *gateView) tokensFor() *keyTokens {
	if g.keyTokens != nil || !g.keyRated() {
		return g.keyTokens
	}
	g.keyTokens = &keyTokens{flow: g.flow, own: g.own, buckets: g.keyBuckets, now: g.bucket.now,
		left: map[string]int64{}, taken: map[string]int{}}
	return g.keyTokens
}

// keyRated reports whether any key of the queue has a rate limit.
func (g *gateView) keyRated() bool {
	if g.flow.KeyRateLimit.PerSecond > 0 {
		return true
	}
	for _, ks := range g.own {
		if ks.RateLimit.PerSecond > 0 {
			return true
		}
	}
	return false
}

// keyHolds checks the snoozes with scope "key" among ops[todo], whose
// tasks' rows are recs: each one's key must have a rate limit, else its
// result is NoKeyRate and refused says so. It returns the others' rate
// limits by op index.
func (s *Store) keyHolds(ctx context.Context, conn *pgx.Conn, ops []norn.LeaseOp, todo []int, recs map[string]*rec,
	results []norn.LeaseOpResult) (rates map[int]norn.RateLimit, refused map[int]bool, err error) {
	var idx []int
	var queues, keys []string
	for _, i := range todo {
		r := recs[ops[i].TaskID]
		if ops[i].Op != norn.OpSnooze || ops[i].Snooze.Scope != norn.SnoozeScopeKey || r == nil {
			continue
		}
		idx, queues, keys = append(idx, i), append(queues, r.Queue), append(keys, r.ConcurrencyKey)
	}
	if len(idx) == 0 {
		return nil, nil, nil
	}
	rows, err := conn.Query(ctx, s.q(`SELECT CASE WHEN k.rate_per_second > 0 THEN k.rate_per_second ELSE coalesce(q.key_rate_per_second, 0) END,
	CASE WHEN k.rate_per_second > 0 THEN k.rate_burst ELSE coalesce(q.key_rate_burst, 0) END
FROM unnest($1::text[], $2::text[]) WITH ORDINALITY u(queue, key, n)
LEFT JOIN {s}.queues q ON q.name = u.queue LEFT JOIN {s}.queue_keys k ON k.queue = u.queue AND k.key = u.key ORDER BY u.n`), queues, keys)
	if err != nil {
		return nil, nil, err
	}
	var got []norn.RateLimit
	var rl norn.RateLimit
	var burst int32
	if _, err := pgx.ForEachRow(rows, []any{&rl.PerSecond, &burst}, func() error {
		rl.Burst = int(burst)
		got = append(got, rl)
		return nil
	}); err != nil {
		return nil, nil, err
	}
	rates, refused = map[int]norn.RateLimit{}, map[int]bool{}
	for j, i := range idx {
		if keys[j] == "" || j >= len(got) || got[j].PerSecond <= 0 {
			results[i].Err = asNornErr(norn.NoKeyRate(queues[j], keys[j]))
			refused[i] = true
			continue
		}
		rates[i] = got[j]
	}
	return rates, refused, nil
}

// holdKeys empties, after the batch's changes committed, the buckets of
// the keys whose tasks' snoozes with scope "key" succeeded, until each
// snooze ends (norn.KeyBackoff). A later bucket (another such snooze) is
// kept when it ends later.
func (s *Store) holdKeys(ctx context.Context, conn *pgx.Conn, ops []norn.LeaseOp, rates map[int]norn.RateLimit,
	recs map[string]*rec, ok map[string]bool, now time.Time) error {
	var queues, keys []string
	var at []time.Time
	for i, rl := range rates {
		op := ops[i]
		r := recs[op.TaskID]
		if !ok[op.TaskID] || r == nil {
			continue
		}
		bk := norn.KeyBackoff(rl, op.Snooze.SnoozeEnd(now), now)
		queues, keys, at = append(queues, r.Queue), append(keys, r.ConcurrencyKey), append(at, bk.At)
	}
	if len(keys) == 0 {
		return nil
	}
	_, err := conn.Exec(ctx, s.q(`INSERT INTO {s}.key_buckets AS b (queue, key, tokens, at)
SELECT u.q, u.k, 0, u.a FROM unnest($1::text[], $2::text[], $3::timestamptz[]) u(q, k, a)
ON CONFLICT (queue, key) DO UPDATE SET tokens = 0, at = greatest(b.at, EXCLUDED.at)`), queues, keys, at)
	return err
}

// pruneKeyBucketsSQL deletes the key buckets that have refilled to their
// burst at the database's time (or $1, the injected clock), and those of
// keys left without a rate limit: the sweep's.
const pruneKeyBucketsSQL = `DELETE FROM {s}.key_buckets b WHERE NOT EXISTS (SELECT 1 FROM {s}.queues q
	LEFT JOIN {s}.queue_keys k ON k.queue = b.queue AND k.key = b.key AND k.rate_per_second > 0
	CROSS JOIN LATERAL (SELECT coalesce(k.rate_per_second, q.key_rate_per_second) AS r,
		coalesce(k.rate_burst, q.key_rate_burst) AS burst) x
	WHERE q.name = b.queue AND x.r > 0
		AND b.tokens + greatest(extract(epoch FROM coalesce($1::timestamptz, clock_timestamp()) - b.at)::float8, 0) * x.r < x.burst)`

// keyPruneEvery is how often a node's sweep prunes the key buckets: the
// statement reads every row of key_buckets, and a full bucket left a
// little longer costs nothing but its row.
const keyPruneEvery = 10 * time.Second

// pruneKeyBuckets runs pruneKeyBucketsSQL at most every keyPruneEvery (an
// injected clock prunes at every sweep, so tests see it).
func (s *Store) pruneKeyBuckets(ctx context.Context) error {
	now := time.Now().UnixNano()
	if last := s.keyPruned.Load(); s.clockNow() == nil && now-last < int64(keyPruneEvery) {
		return nil
	}
	s.keyPruned.Store(now)
	return s.withConn(ctx, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, s.q(pruneKeyBucketsSQL), s.clockNow())
		return err
	})
}
