package postgres

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nornq/norn"
)

// Flow control. A queue with limits (queues.flow_limited) is skipped by
// the plain claim and claimed here, on one of three paths that share one
// per-queue advisory lock, the gate (the third, for small key limits, is
// the keyed path: keyed.go):
//
//   - The shared path, taken while the limits are far: a claim takes the
//     gate in shared mode and one of flowSlots slot locks, then — in a
//     later statement, so with a snapshot taken after both — bounds the
//     queue's running tasks (a recent count plus what the slot rows say
//     was admitted since, or a count: sharedVerdictSQL) and claims like an
//     unlimited queue if the bound plus flowSlots × MaxClaim is within
//     every count limit (the queue's max_running, key_limit and every
//     key's own limit). Shared claims run concurrently, and none waits
//     for another's commit.
//     A rate-limited queue's claim takes its tokens inside the claim
//     statement (claimRated, ratelimit.go).
//   - The exclusive path, near a limit or for a fair or paused queue: the
//     gate in exclusive mode (waiting for every shared
//     claim to commit and keeping new ones out), then the running count
//     per key and a pick that admits exactly up to the limits.
//
// Why the shared path never over-admits: a claim bounds with a snapshot
// taken after it holds a slot and the gate. Let y be the claim that took
// it last among those committed by some instant. The tasks of every claim
// that committed before y's snapshot are within y's bound (its count, or
// an older count plus the admissions committed since, which every claim
// adds to its slot row in its own transaction); every other committed
// claim took its snapshot before y and committed after, so it held its
// slot (taken before its verdict, released after its commit is visible)
// when y read: at most flowSlots − 1 of them, each of at most MaxClaim
// tasks, and none an exclusive claim (the gate). So the running tasks are
// at most y's bound plus flowSlots × MaxClaim, which y checked against the
// smallest limit — and a key never has more running tasks than its queue.
// An exclusive y has nothing in flight when it counts and admits exactly.
// Completions, failures, timeouts and the rest take no lock and write no
// slot row: a task leaving running only lowers the truth under the bound,
// so every way out of running frees its place without bookkeeping. Costs:
// a shared claim reads the queue's slot rows and updates its own, and
// counts the running tasks (O(running), the (queue, status) index, dead
// entries included) only near a limit or once per flowSlots × MaxClaim
// admissions; exclusive claims run one at a time, plus the GROUP BY per
// key.

// flowSlots is how many shared claims of one queue may be in flight at
// once (a further one waits for a slot); flowSlots × norn.MaxClaim is how
// far below every limit the running count must be for the shared path.
const flowSlots = 8

// flowState is the node's side of the shared path: queues that cannot
// take it for a while, and (tests) smaller slots and claims.
type flowState struct {
	mu        sync.Mutex
	exclusive map[string]time.Time // queue → until when its claims go straight to the exclusive path
	rated     map[string]time.Time // queue → until when its claims go straight to claimRated
	keyed     map[string]time.Time // queue → until when its claims go straight to the keyed path (keyed.go)
	narrow    map[string]time.Time // queue → until when its keyed claims read at most keyedNarrow candidates (keyed.go)
	// queue → the key buckets its keyed claims hold exclusively (keyed.go)
	tightBuckets map[string]tightMark
	limited      map[string]time.Time // queue → until when its claims skip the plain claim
	slots        int                  // 0: flowSlots
	cap          int                  // largest shared claim; 0: norn.MaxClaim
	recheck      time.Duration        // how long a queue stays ruled out; 0: staticRecheck (tests)
	// queue → where the last limited pick's read of tasks without a key
	// past the head stopped (pickLimited)
	keylessFrom  map[string]readyCand
	keylessChunk int // tasks that read reads; 0: pickChunk (tests)
	sqlOnce      sync.Once
	// The exclusive path's claim of the first ready tasks; the shared
	// path's claim, and from a claim hint; the keyed path's, and from a
	// hint (buildFlowSQL).
	claimFirstSQL, leaseSQL, ratedLeaseSQL, keyedSQL, keyedFromSQL string
	// Claims that took each path (tests).
	sharedClaims, exclusiveClaims, keyedClaims atomic.Int64
	// Keyed claims that admitted tasks holding every bucket shared (tests).
	keyedSharedClaims atomic.Int64
	counts            atomic.Int64 // shared verdicts that counted the running tasks (tests)
}

// staticRecheck is how long a queue whose settings rule the shared path
// out (small limits, fair_by, paused) goes straight to the
// exclusive path before the settings are read again.
const staticRecheck = time.Second

// knownLimited reports whether a claim of queue should go straight to
// claimLimited: the plain claim found it limited less than staticRecheck
// ago. Stale is harmless: claimLimited claims an unlimited queue too.
func (s *Store) knownLimited(queue string) bool {
	return s.flow.known(&s.flow.limited, queue)
}

// claimFoundLimited notes that the plain claim skipped queue for its
// limits, and claims it on the limited path.
func (s *Store) claimFoundLimited(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64) ([]*norn.Task, error) {
	s.flow.mark(&s.flow.limited, queue, true)
	return s.claimLimited(ctx, conn, queue, want, worker, timeout)
}

func (f *flowState) margins() (slots, cap int) {
	slots, cap = flowSlots, norn.MaxClaim
	if f.slots > 0 {
		slots = f.slots
	}
	if f.cap > 0 {
		cap = f.cap
	}
	return slots, cap
}

// known reports whether queue was marked in m (one of flowState's maps)
// less than staticRecheck ago.
func (f *flowState) known(m *map[string]time.Time, queue string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	until, ok := (*m)[queue]
	if ok && time.Now().After(until) {
		delete(*m, queue)
		return false
	}
	return ok
}

// mark notes queue in m for staticRecheck (the test's recheck, if set),
// or forgets it.
func (f *flowState) mark(m *map[string]time.Time, queue string, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !on {
		delete(*m, queue)
		return
	}
	if *m == nil {
		*m = map[string]time.Time{}
	}
	(*m)[queue] = time.Now().Add(f.recheckFor())
}

// recheckFor is how long a mark lasts: staticRecheck, or the tests' recheck.
func (f *flowState) recheckFor() time.Duration {
	if f.recheck > 0 {
		return f.recheck
	}
	return staticRecheck
}

func (f *flowState) skipShared(queue string) bool { return f.known(&f.exclusive, queue) }

func (f *flowState) ruleOut(queue string) { f.mark(&f.exclusive, queue, true) }

// knownRated reports whether queue was found rate limited less than
// staticRecheck ago, so its claims go straight to claimRated. Stale is
// harmless both ways: the verdict tells an untaken claim of a rated queue
// (sharedRated), and claimRated of a queue without a rate limit finds no
// bucket to take from and falls back to the exclusive path.
func (f *flowState) knownRated(queue string) bool { return f.known(&f.rated, queue) }

func (f *flowState) markRated(queue string, rated bool) { f.mark(&f.rated, queue, rated) }

// The shared path's verdicts.
const (
	sharedOK     = "ok"     // claimed on the shared path
	sharedStatic = "static" // the settings rule it out: small limits, fair_by, paused
	sharedRated  = "rated"  // rate limited, and the claim took no tokens: claimRated
	sharedNear   = "near"   // the running count is too close to a limit now
	// sharedKeyed (keyed.go): the key limits are small, max_running far
)

// sharedVerdictSQL decides, with a snapshot taken after the gate and the
// slot are held, whether this claim may take the shared path, and tells
// the claim statement through a transaction-local setting. $2 is
// flowSlots × the largest shared claim; $3 whether the claim took its
// tokens already (a rate-limited queue's claims must: claimRated); $4 the
// most this claim may take. A queue without count limits (lim NULL)
// needs no bound on its running tasks. A queue whose key limits are under
// the margin and whose max_running is absent or past it is keyed: its
// verdict is "keyed" (the keyed claim's statements run on it), and the
// bound is kept against max_running alone (blim).
//
// The bound: the slot rows (queue_flow_slots) hold what the claims of
// each slot may have admitted, and each the last count a claim of that
// slot made, with the admitted sum and the queue row's version (xmin) it
// read in the same snapshot. A count c with sum a bounds the running
// tasks of any later snapshot by c + (sum now − a): every task that went
// running since was admitted by a claim whose slot row update committed
// with it (the exclusive path adds its tasks to slot 0). The claim counts
// only when no such bound is far enough from the limit, or when the
// freshest count is more than $2 admissions old and the bound is above
// half the limit (so the bound stays close where that matters); it then
// stores its count in its own slot row. A count made
// under other settings (another xmin: UpdateQueue rewrote the row, say
// when the queue became limited and plain claims had run) is not used.
var sharedVerdictSQL = `WITH q0 AS (SELECT paused OR fair_by <> '' AS other, rate_per_second > 0 AS rated, xmin::text AS ver,
	nullif(max_running, 0) AS mlim,
	least(nullif(key_limit, 0), (SELECT min(k.lim) FROM {s}.queue_keys k WHERE k.queue = $1 AND k.lim > 0)) AS klim
	FROM {s}.queues WHERE name = $1),
q1 AS (SELECT q0.*, least(mlim, klim) AS lim,
	NOT other AND klim < $2 AND (mlim IS NULL OR mlim >= $2) AS keyed FROM q0),
q AS (SELECT q1.*, CASE WHEN keyed THEN mlim ELSE lim END AS blim FROM q1),
sl AS (SELECT coalesce(sum(admitted), 0)::bigint AS adm,
	min(cert_running - cert_admitted) FILTER (WHERE cert_ver = (SELECT ver FROM q)) AS base,
	max(cert_admitted) FILTER (WHERE cert_ver = (SELECT ver FROM q)) AS fresh
	FROM {s}.queue_flow_slots WHERE queue = $1),
c AS (SELECT q.*, sl.adm, CASE WHEN q.other OR q.blim IS NULL OR (NOT q.keyed AND q.lim < $2) OR (q.rated AND NOT $3)
		OR (sl.base + sl.adm <= q.blim - $2 AND (sl.adm - sl.fresh <= $2 OR sl.base + sl.adm <= q.blim / 2)) THEN NULL
	ELSE (SELECT count(*) FROM {s}.tasks t WHERE t.queue = $1 AND t.status = 'running')
		+ (SELECT coalesce(sum(greatest(cardinality(l.ids) - l.done, 0)), 0) FROM {s}.leases l WHERE l.queue = $1) END AS counted
	FROM q, sl),
v AS (SELECT CASE WHEN other OR (NOT keyed AND lim < $2) THEN 'static' WHEN rated AND NOT $3 THEN 'rated'
	WHEN counted > blim - $2 THEN 'near' WHEN keyed THEN 'keyed' ELSE 'ok' END AS v, counted IS NOT NULL AS counted FROM c),
up AS (INSERT INTO {s}.queue_flow_slots AS f (queue, slot, admitted, cert_ver, cert_running, cert_admitted)
	SELECT $1::text, current_setting('norn.flow_slot')::int, $4::bigint, c.ver, c.counted, c.adm FROM c, v
	WHERE v.v IN ('ok', 'keyed') AND c.blim IS NOT NULL
	ON CONFLICT (queue, slot) DO UPDATE SET admitted = f.admitted + EXCLUDED.admitted,
		cert_ver = CASE WHEN EXCLUDED.cert_running IS NULL THEN f.cert_ver ELSE EXCLUDED.cert_ver END,
		cert_running = coalesce(EXCLUDED.cert_running, f.cert_running),
		cert_admitted = CASE WHEN EXCLUDED.cert_running IS NULL THEN f.cert_admitted ELSE EXCLUDED.cert_admitted END)
SELECT v, counted, set_config('norn.flow_shared', v, true), ` + claimSetupGUCs + ` FROM v`

// bumpSlotSQL adds an exclusive claim's tasks to slot 0's admissions, so
// that counts made before it bound the running tasks after it too.
const bumpSlotSQL = `INSERT INTO {s}.queue_flow_slots AS f (queue, slot, admitted) VALUES ($1, 0, $2)
ON CONFLICT (queue, slot) DO UPDATE SET admitted = f.admitted + EXCLUDED.admitted`

// verdictGUCs plan the verdict, whose count of the queue's running tasks
// must read tasks_running even with a plan made while the task table was
// empty (a drained queue after VACUUM: a sequential scan of the whole
// table, cached and kept as the next backlog arrives).
const verdictGUCs = "set_config('enable_seqscan', 'off', true)"

// sharedLockSQL takes the gate in shared mode, then a free slot, or waits
// for one (the gate first: an exclusive claim waiting for the gate then
// waits for this claim, never the other way round), and notes the slot in
// norn.flow_slot for the verdict. It also turns sequential scans off for
// the verdict (verdictGUCs).
const sharedLockSQL = `SELECT ` + verdictGUCs + `, CASE WHEN pg_advisory_xact_lock_shared(hashtextextended($1, 0)) IS NULL THEN NULL ELSE set_config('norn.flow_slot', coalesce(
	(SELECT s FROM generate_series(0, $3 - 1) s WHERE pg_try_advisory_xact_lock(hashtext($2), s) LIMIT 1),
	(SELECT CASE WHEN pg_advisory_xact_lock(hashtext($2), pg_backend_pid() % $3) IS NULL THEN NULL ELSE pg_backend_pid() % $3 END))::text, true) END`

// claimShared tries the shared path in one round trip: the locks, the
// verdict and the lease claim (which claims nothing unless the verdict is
// ok), in one implicit transaction, so the locks are held until it
// commits.
func (s *Store) claimShared(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64) ([]*norn.Task, string, error) {
	slots, cap := s.flow.margins()
	s.flow.sqlOnce.Do(s.buildFlowSQL)
	// The plain claim with ready rows, on the verdict's condition
	// (claimQueue has why the rows it locks adapt).
	readyRows := s.readyRows.get(queue)
	b := &pgx.Batch{}
	b.Queue(sharedLockSQL, s.channel+"/flow/"+queue, s.channel+"/flowslot/"+queue, slots)
	verdictQ := b.Queue(s.q(sharedVerdictSQL), queue, slots*cap, false, int64(min(want, cap)))
	claimQ := b.Queue(s.flow.leaseSQL, queue, min(want, cap), s.clockNow(), worker, timeout, s.cfg.HistoryLimit, readyRows)
	var (
		verdict string
		counted bool
		out     []*norn.Task
	)
	verdictQ.QueryRow(func(row pgx.Row) (err error) {
		verdict, counted, err = scanVerdict(row)
		return err
	})
	claimQ.Query(func(rows pgx.Rows) (err error) {
		// In claim order (the lease claim's rows come in no order).
		out, _, err = collectClaimed(rows)
		return err
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, "", err
	}
	// A claim that came back short may have locked too few rows; the next
	// one locks more.
	if len(out) < min(want, cap) && verdict == sharedOK {
		readyRows = min(readyRows*4, maxReadyRows)
	}
	s.readyRows.set(queue, readyRows, len(out) == min(want, cap))
	if counted {
		s.flow.counts.Add(1)
	}
	return out, verdict, nil
}

// buildFlowSQL builds the claims of the flow paths: the shared one's, the
// plain lease claim on the condition the verdict set (and its rate-limited
// form); the exclusive one's of the first ready tasks; the keyed ones.
func (s *Store) buildFlowSQL() {
	s.flow.leaseSQL = s.buildLeaseClaimSQL(`current_setting('norn.flow_shared', true) = 'ok'`)
	s.flow.ratedLeaseSQL = s.buildRatedLeaseSQL()
	s.flow.claimFirstSQL = s.buildAssignKeyedSQL(`c AS (SELECT t.id FROM {s}.tasks t
	WHERE t.status = 'ready' AND t.ready_batch IS NULL AND t.queue = $1
	ORDER BY t.priority DESC, t.ready_at, t.id LIMIT $2 FOR UPDATE SKIP LOCKED)`) + claimOrder
	s.buildKeyedSQL()
}

// claimLimited claims up to want tasks of a flow-limited queue: on the
// shared path when it may, else on the exclusive one.
func (s *Store) claimLimited(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64) ([]*norn.Task, error) {
	if !s.flow.skipShared(queue) {
		if s.flow.knownRated(queue) {
			out, done, err := s.claimRated(ctx, conn, queue, want, worker, timeout)
			if done || err != nil {
				return out, err
			}
		} else {
			verdict := sharedKeyed
			var out []*norn.Task
			if !s.flow.known(&s.flow.keyed, queue) {
				var err error
				if out, verdict, err = s.claimShared(ctx, conn, queue, want, worker, timeout); err != nil {
					return nil, err
				}
			}
			switch verdict {
			case sharedOK:
				s.flow.sharedClaims.Add(1)
				return out, nil
			case sharedStatic:
				s.flow.ruleOut(queue)
			case sharedRated:
				s.flow.markRated(queue, true)
				out, done, err := s.claimRated(ctx, conn, queue, want, worker, timeout)
				if done || err != nil {
					return out, err
				}
			case sharedKeyed:
				s.flow.mark(&s.flow.keyed, queue, true)
				out, done, err := s.claimKeyedOrExclusive(ctx, conn, queue, want, worker, timeout)
				if done || err != nil {
					return out, err
				}
			}
		}
	}
	s.flow.exclusiveClaims.Add(1)
	return s.claimExclusive(ctx, conn, queue, want, worker, timeout)
}

// runningByKeySQL counts a queue's running tasks by concurrency key (the
// empty string for none), only when a count limit needs it.
const runningByKeySQL = `SELECT coalesce(concurrency_key, ''), count(*) FROM {s}.tasks
WHERE queue = $1 AND status = 'running' AND (SELECT q.max_running > 0 OR q.key_limit > 0
	OR EXISTS (SELECT 1 FROM {s}.queue_keys k WHERE k.queue = $1 AND k.lim > 0) FROM {s}.queues q WHERE q.name = $1)
GROUP BY 1`

// claimExclusive claims up to want tasks of a flow-limited queue with
// the gate held exclusively: counted per key, admitted exactly. It holds
// the gate for as few round trips as it can, since every claim of the
// queue waits for it: BEGIN with the first reads, the pick's reads, then
// its writes with the claim and COMMIT (a rate-limited claim writes its
// bucket after the claim, one more).
func (s *Store) claimExclusive(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64) (out []*norn.Task, err error) {
	defer func() {
		if err != nil && !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
			_, _ = conn.Exec(ctx, "ROLLBACK")
		}
	}()
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, s.channel+"/flow/"+queue)
	b.Queue(noSeqScanSQL)
	// The queue's leases and first ready rows (shared and keyed claims
	// take tasks through them) become ordinary rows: the counts below
	// count running rows, and the pick reads ordinary ones at the head.
	// Each task is moved once, so this costs one more write per task at
	// most, and nothing when the queue has neither.
	s.queueSettleHead(b, queue, 4*want+16)
	b.Queue(s.q(`SELECT paused, max_running, key_limit, fair_by, fair_now, rate_per_second, rate_burst
FROM {s}.queues WHERE name = $1`), queue)
	b.Queue(s.q(`SELECT key, lim, weight FROM {s}.queue_keys WHERE queue = $1 AND (lim > 0 OR weight > 0)`), queue)
	// Counted only when a count limit needs it (a fair or rate-limited
	// queue may have none).
	b.Queue(s.q(runningByKeySQL), queue)
	b.Queue(s.q(bucketInitSQL), queue, s.clockNow())
	b.Queue(s.q(bucketSQL), queue, s.clockNow())
	br := conn.SendBatch(ctx, b)
	for range 5 {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return nil, err
		}
	}
	var readyLeft bool // ready rows past the head remain
	if err := br.QueryRow().Scan(&readyLeft); err != nil {
		br.Close()
		return nil, err
	}
	var (
		paused                        bool
		maxRunning, keyLimit, rateBur int32
		fairBy                        string
		fairNow                       int64
		ratePS                        float64
	)
	if err := br.QueryRow().Scan(&paused, &maxRunning, &keyLimit, &fairBy, &fairNow, &ratePS, &rateBur); err != nil && err != pgx.ErrNoRows {
		br.Close()
		return nil, err
	}
	flow := norn.QueueFlow{MaxRunning: int(maxRunning), KeyLimit: int(keyLimit), FairBy: fairBy,
		RateLimit: norn.RateLimit{PerSecond: ratePS, Burst: int(rateBur)}}
	own := map[string]*norn.KeySettings{}
	rows, _ := br.Query()
	var key string
	var n int64
	var lim, weight int32
	if _, err := pgx.ForEachRow(rows, []any{&key, &lim, &weight}, func() error {
		own[key] = &norn.KeySettings{Limit: int(lim), Weight: int(weight)}
		return nil
	}); err != nil {
		br.Close()
		return nil, err
	}
	running := map[string]int64{}
	var total int64
	rows, _ = br.Query()
	if _, err := pgx.ForEachRow(rows, []any{&key, &n}, func() error {
		running[key] = n
		total += n
		return nil
	}); err != nil {
		br.Close()
		return nil, err
	}
	if _, err := br.Exec(); err != nil { // bucketInitSQL
		br.Close()
		return nil, err
	}
	var bucket bucketRow
	if err := br.QueryRow().Scan(&bucket.now, &bucket.tokens, &bucket.at); err != nil {
		br.Close()
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	if paused {
		_, err := conn.Exec(ctx, "COMMIT")
		return nil, err
	}
	// What max_running and the rate limit allow (-1: no such limit).
	maxRoom, tokens, pick := -1, -1, want
	if flow.MaxRunning > 0 {
		maxRoom = int(max(int64(flow.MaxRunning)-total, 0))
	}
	if flow.RateLimited() {
		tokens = bucket.bucket(flow.RateLimit).Whole()
		pick = min(pick, tokens)
	}
	// The last batch: the pick's writes, the claim, what it left ready,
	// and (without a rate limit, whose bucket is written after) COMMIT.
	var ids picked
	fast := pick > 0 && flow.FairBy == "" && cannotBind(flow, own, running, total, pick)
	switch {
	case pick <= 0 || fast:
	case flow.FairBy != "":
		ids = s.pickFair(ctx, conn, queue, pick, flow, own, running, total, fairNow)
	default:
		ids = s.pickLimited(ctx, conn, queue, pick, flow, own, running, total, readyLeft)
	}
	if ids.err != nil {
		return nil, ids.err
	}
	fb := ids.writes
	if fb == nil {
		fb = &pgx.Batch{}
	}
	if len(ids.ids) > 0 && !fast {
		// Tasks it found by key past the head may be in ready rows.
		s.queueDetach(fb, ids.ids)
	}
	if n := len(ids.ids); (fast || n > 0) && countLimited(flow, own) {
		if fast {
			n = pick
		}
		fb.Queue(s.q(bumpSlotSQL), queue, int64(n))
	}
	writes := fb.Len()
	claims := true
	switch {
	case fast:
		// Under the lock, with these counts, no limit can stop this
		// claim: take the first ready tasks in one statement, as an
		// unlimited queue's claim does, instead of reading candidates and
		// claiming them by id.
		s.flow.sqlOnce.Do(s.buildFlowSQL)
		fb.Queue(s.flow.claimFirstSQL, queue, pick, bucket.now, worker, timeout, s.cfg.HistoryLimit)
	case len(ids.ids) > 0:
		// The claim's time is the bucket's: one clock for both.
		fb.Queue(s.sql.claimIDs, ids.ids, len(ids.ids), bucket.now, worker, timeout, s.cfg.HistoryLimit)
	default:
		claims = false
	}
	rated := flow.RateLimited()
	if !rated {
		fb.Queue(s.q(leftSQL), queue, want)
		fb.Queue("COMMIT")
	}
	if fb.Len() > 0 {
		br := conn.SendBatch(ctx, fb)
		for range writes {
			if _, err := br.Exec(); err != nil {
				br.Close()
				return nil, err
			}
		}
		if claims {
			rows, err := br.Query()
			if err != nil {
				br.Close()
				return nil, err
			}
			if out, err = collectClaimedRows(rows); err != nil {
				br.Close()
				return nil, err
			}
		}
		if !rated {
			var left int
			if err := br.QueryRow().Scan(&left); err != nil {
				br.Close()
				return nil, err
			}
			if _, err := br.Exec(); err != nil {
				br.Close()
				return nil, err
			}
			if err := br.Close(); err != nil {
				return nil, err
			}
			if len(out) < want {
				s.noteHeld(queue, flow, norn.Bucket{}, want, len(out), min(left, want-len(out)), maxRoom, tokens)
			}
			return out, nil
		}
		if err := br.Close(); err != nil {
			return nil, err
		}
	}
	if err := s.settleClaim(ctx, conn, queue, flow, bucket, want, len(out), maxRoom, tokens); err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, "COMMIT")
	return out, err
}

// leftSQL counts, up to $2, the ready tasks a claim left (its own are
// running by then): what a short claim was held back from.
const leftSQL = `SELECT count(*) FROM (SELECT 1 FROM {s}.tasks WHERE status = 'ready' AND queue = $1 LIMIT $2) r`

// flowQuerier is what the pick runs its statements on: the connection,
// inside the claim's transaction.
type flowQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// cannotBind reports whether the limits leave room for want more tasks
// whatever keys they have: the queue has room for want, and so has every
// key (the running ones by their counts, the others by the smallest limit
// any key may have).
func cannotBind(flow norn.QueueFlow, own map[string]*norn.KeySettings, running map[string]int64, total int64, want int) bool {
	// A rate limit does not enter into it: want is within the whole
	// tokens already.
	w := int64(want)
	if r := flow.Admit(total, 0, 0); r >= 0 && r < w {
		return false
	}
	least := int64(flow.KeyLimit)
	for _, ks := range own {
		if ks.Limit > 0 && (least == 0 || int64(ks.Limit) < least) {
			least = int64(ks.Limit)
		}
	}
	if least > 0 && least < w {
		return false
	}
	for k, n := range running {
		if l := int64(flow.KeyLimitFor(k, own[k])); l > 0 && l-n < w {
			return false
		}
	}
	return true
}

// countLimited reports whether the queue has a count limit, so that the
// shared path bounds its running tasks by the slot rows.
func countLimited(flow norn.QueueFlow, own map[string]*norn.KeySettings) bool {
	if flow.MaxRunning > 0 || flow.KeyLimit > 0 {
		return true
	}
	for _, ks := range own {
		if ks.Limit > 0 {
			return true
		}
	}
	return false
}

type picked struct {
	ids    []string
	writes *pgx.Batch // to send with the claim (nil: none)
	err    error
}

// pickLimited chooses, in claim order, the ready tasks the limits admit.
//
// It reads the first 4 × want + 16 ready tasks of the queue and admits
// them in order while their keys and the queue have room; that settles
// every claim whose head is not mostly keys at their limits, in O(want).
// Past them it does not step over the blocked keys' backlog, which would
// cost every claim O(ready tasks) for as long as one key's backlog fills
// the queue's head (a key_limit of 1 and a tenant with a million tasks).
// In one more round trip it reads the next pickHead ready tasks; each key
// with room's first tasks past the head, the keys listed through
// tasks_key_ready, one index probe per key (pastHeadSQL: O(K log n) for K
// keys); and, for the tasks without a key, which are not in that index,
// the next pickChunk ready tasks from where the previous pick of the queue
// stopped, wrapping round at the end. It admits what they found in claim
// order. So a pick costs O(want + pickHead + pickChunk + K log n) however
// long the backlog, and a task without a key behind a backlog of n
// held-back tasks waits at most n / pickChunk picks.
func (s *Store) pickLimited(ctx context.Context, tx flowQuerier, queue string, want int, flow norn.QueueFlow,
	own map[string]*norn.KeySettings, running map[string]int64, total int64, readyLeft bool) picked {
	if flow.MaxRunning > 0 {
		want = int(min(int64(want), max(int64(flow.MaxRunning)-total, 0)))
	}
	if want <= 0 {
		return picked{}
	}
	p := &limitedPick{flow: flow, own: own, running: running, total: total, want: want}
	first := 4*want + 16
	rows, err := tx.Query(ctx, s.q(`SELECT id, coalesce(concurrency_key, ''), priority, ready_at FROM {s}.tasks
WHERE status = 'ready' AND ready_batch IS NULL AND queue = $1 ORDER BY priority DESC, ready_at, id LIMIT $2`), queue, first)
	if err != nil {
		return picked{err: err}
	}
	head, err := collectCands(rows)
	if err != nil {
		return picked{err: err}
	}
	for _, c := range head {
		p.offer(c)
	}
	if p.full() || len(head) < first && !readyLeft {
		return picked{ids: p.taken}
	}
	// One round trip for the rest (the claim holds the queue's gate):
	// the next pickHead tasks, each key's first tasks past the head (in
	// ready rows or not), and the next chunk for tasks without a key.
	last := readyCand{priority: math.MaxInt64}
	if len(head) > 0 {
		last = head[len(head)-1]
	}
	b := &pgx.Batch{}
	b.Queue(s.pastSQL(), queue, last.priority, last.readyAt, last.id, pickHead)
	rooms, def, err := p.rooms()
	if err != nil {
		return picked{err: err}
	}
	b.Queue(s.pastHeadSQL(), queue, last.priority, last.readyAt, last.id, rooms, def)
	from := last
	if c, ok := s.flow.chunkFrom(queue); ok && c.compare(last) > 0 {
		from = c
	}
	b.Queue(s.pastSQL(), queue, from.priority, from.readyAt, from.id, s.flow.chunk())
	br := tx.SendBatch(ctx, b)
	var parts [3][]readyCand
	for i := range parts {
		rows, err := br.Query()
		if err == nil {
			parts[i], err = collectCands(rows)
		}
		if err != nil {
			br.Close()
			return picked{err: err}
		}
	}
	if err := br.Close(); err != nil {
		return picked{err: err}
	}
	next, keyed, chunk := parts[0], parts[1], parts[2]
	if len(chunk) < s.flow.chunk() {
		s.flow.setChunkFrom(queue, nil) // the end: the next pick reads from the head again
	} else {
		end := slices.MaxFunc(chunk, func(a, b readyCand) int { return a.compare(b) })
		s.flow.setChunkFrom(queue, &end)
	}
	cands := append(next, keyed...)
	for _, c := range chunk {
		if c.key == "" {
			cands = append(cands, c)
		}
	}
	slices.SortFunc(cands, func(a, b readyCand) int { return a.compare(b) })
	for i, c := range cands {
		if p.full() {
			break
		}
		if i > 0 && cands[i-1].id == c.id {
			continue // read by two of the reads
		}
		p.offer(c)
	}
	return picked{ids: p.taken}
}

// pickHead is how many ready tasks a limited pick reads right after the
// first 4 × want + 16, if those were not enough.
const pickHead = 1024

// pickChunk is how many ready tasks past the head a limited pick reads,
// from where the last one stopped, to find tasks without a key.
const pickChunk = 2 * pickHead

// readyCand is one ready task read by a limited or fair pick (key: its
// concurrency key, or "" where the read does not need it).
type readyCand struct {
	id       string
	key      string
	priority int64
	readyAt  time.Time
}

// compare orders two ready tasks in claim order.
func (a readyCand) compare(b readyCand) int {
	return compareClaimOrder(a.priority, a.readyAt, a.id, b.priority, b.readyAt, b.id)
}

// limitedPick is a limited pick in progress: what it took, and the
// running counts with its takes added.
type limitedPick struct {
	flow    norn.QueueFlow
	own     map[string]*norn.KeySettings
	running map[string]int64
	total   int64
	want    int
	taken   []string
}

// room is how many more tasks of key the limits admit (-1: any number).
func (p *limitedPick) room(key string) int64 {
	return p.flow.Admit(p.total, p.running[key], p.flow.KeyLimitFor(key, p.own[key]))
}

func (p *limitedPick) full() bool { return len(p.taken) >= p.want }

// offer takes the task if the claim wants more and its key has room. The
// tasks must be offered in claim order.
func (p *limitedPick) offer(c readyCand) {
	if p.full() || p.room(c.key) == 0 {
		return
	}
	p.taken = append(p.taken, c.id)
	p.running[c.key]++
	p.total++
}

// afterSQL selects, with sel (a SELECT list over tasks t) and the
// conditions cond, the first lim tasks in claim order after the task ($2
// priority, $3 ready_at, $4 id). It is two index ranges, the rest of that
// task's priority and the lower priorities, one after the other: as one
// condition with OR the index scan would start at the queue's head and
// filter its way to the task.
func afterSQL(sel, cond, lim string) string {
	const order = ` ORDER BY t.priority DESC, t.ready_at, t.id LIMIT `
	return `SELECT u.* FROM ((` + sel + ` WHERE ` + cond + ` AND t.priority = $2 AND (t.ready_at, t.id) > ($3::timestamptz, $4::text)` + order + lim + `)
	UNION ALL (` + sel + ` WHERE ` + cond + ` AND t.priority < $2` + order + lim + `)) u LIMIT ` + lim
}

// rooms returns, for the read of each key's first tasks past the head
// (pastHeadSQL), each key's room where it is not the default (keys with
// running tasks or their own settings) as a JSON object, and the default:
// as many as the key's room, at most what the claim still wants.
func (p *limitedPick) rooms() (string, int64, error) {
	left := int64(p.want - len(p.taken))
	rooms := map[string]int64{}
	def := left
	// The room of a key without running tasks or settings: any non-empty
	// key's limit without settings is the queue's key_limit.
	if r := p.flow.Admit(p.total, 0, p.flow.KeyLimitFor("any", nil)); r >= 0 {
		def = min(def, r)
	}
	note := func(k string) {
		if k == "" {
			return
		}
		if r := p.room(k); r >= 0 && r < left {
			rooms[k] = r
		} else {
			rooms[k] = left
		}
	}
	for k := range p.running {
		note(k)
	}
	for k := range p.own {
		note(k)
	}
	j, err := json.Marshal(rooms)
	return string(j), def, err
}

// pastHeadSQL reads, past the position $2–$4 in claim order, the first
// ready tasks of each key of queue $1 with room (its room from $5, a JSON
// object, else $6) through tasks_key_ready: the keys are listed by
// skipping through the index (readyKeysCTE: one probe per key), and a key
// at its limit costs that probe only.
func (s *Store) pastHeadSQL() string {
	return s.q(`WITH RECURSIVE ` + readyKeysCTE("concurrency_key") + `,
kr AS MATERIALIZED (SELECT k.key, coalesce(($5::jsonb ->> k.key)::bigint, $6::bigint) AS room FROM k WHERE k.key IS NOT NULL)
SELECT c.id, kr.key, c.priority, c.ready_at FROM kr CROSS JOIN LATERAL (` + afterSQL(`SELECT t.id, t.priority, t.ready_at FROM {s}.tasks t`,
		`t.queue = $1 AND t.status = 'ready' AND t.concurrency_key IS NOT NULL AND t.concurrency_key = kr.key`, `kr.room`) + `) c
WHERE kr.room > 0`)
}

// pastSQL reads the ready tasks of queue $1 after the position $2–$4 in
// claim order, $5 of them at most (pickLimited).
func (s *Store) pastSQL() string {
	return s.q(afterSQL(`SELECT t.id, coalesce(t.concurrency_key, ''), t.priority, t.ready_at FROM {s}.tasks t`,
		`t.status = 'ready' AND t.ready_batch IS NULL AND t.queue = $1`, `$5`))
}

// collectCands reads rows of (id, key, priority, ready_at).
func collectCands(rows pgx.Rows) ([]readyCand, error) {
	var out []readyCand
	var c readyCand
	_, err := pgx.ForEachRow(rows, []any{&c.id, &c.key, &c.priority, &c.readyAt}, func() error {
		out = append(out, c)
		return nil
	})
	return out, err
}

// chunk is how many tasks a limited pick reads for tasks without a key.
func (f *flowState) chunk() int {
	if f.keylessChunk > 0 {
		return f.keylessChunk
	}
	return pickChunk
}

// chunkFrom returns where the last limited pick of queue stopped reading
// for tasks without a key.
func (f *flowState) chunkFrom(queue string) (readyCand, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.keylessFrom[queue]
	return c, ok
}

// setChunkFrom notes where a limited pick of queue stopped reading for
// tasks without a key (nil: at the end).
func (f *flowState) setChunkFrom(queue string, c *readyCand) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c == nil {
		delete(f.keylessFrom, queue)
		return
	}
	if f.keylessFrom == nil {
		f.keylessFrom = map[string]readyCand{}
	}
	f.keylessFrom[queue] = *c
}

// queueKeys lists the keys of a queue that have their own settings or
// running tasks, sorted.
// A queue fair by a label counts its running tasks by the label's value.
func (s *Store) queueKeys(ctx context.Context, conn *pgx.Conn, queue string, byLabel bool) ([]norn.KeyInfo, error) {
	col := "concurrency_key"
	if byLabel {
		col = "nullif(fair_key, '')"
	}
	// Running tasks are running rows and, by concurrency key, tasks still
	// in lease rows (batches.go; a fair queue has none).
	leased := ""
	if !byLabel {
		leased = ` UNION ALL SELECT u.k, 1 FROM {s}.leases l, unnest(l.ids, l.keys) u(id, k), {s}.tasks t
	WHERE l.queue = $1 AND l.keys IS NOT NULL AND u.k IS NOT NULL AND t.id = u.id AND t.status = 'ready' AND t.ready_batch IS NOT NULL`
	}
	rows, err := conn.Query(ctx, s.q(`SELECT key, coalesce(k.lim, 0), coalesce(k.weight, 0), coalesce(r.n, 0)
FROM (SELECT key, lim, weight FROM {s}.queue_keys WHERE queue = $1) k
FULL JOIN (SELECT key, count(*) AS n FROM (SELECT `+col+` AS key, 1 FROM {s}.tasks
	WHERE queue = $1 AND status = 'running' AND `+col+` IS NOT NULL`+leased+`) z GROUP BY 1) r USING (key)
ORDER BY key`), queue)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (norn.KeyInfo, error) {
		var k norn.KeyInfo
		var lim, weight int32
		err := row.Scan(&k.Key, &lim, &weight, &k.Running)
		k.Limit, k.Weight = int(lim), int(weight)
		return k, err
	})
}
