package postgres

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/nornq/norn"
)

// The shared path: a flow-limited queue whose limits are far. A claim
// takes the queue's gate in shared mode and one of flowSlots slot locks,
// then, with a snapshot taken after both, bounds the queue's running tasks
// (sharedVerdictSQL) and claims like an unlimited queue when the bound plus
// flowSlots × MaxClaim is within every count limit. Shared claims run side
// by side and none waits for another's commit; completions take no lock.
// Why the bound never lets a queue over-admit, and what the slot rows
// cost: docs/internals/postgres-claims.md, "The shared path".

// flowSlots is how many shared claims of one queue may be in flight at
// once (a further one waits for a slot); flowSlots × norn.MaxClaim is how
// far below every limit the running count must be for the shared path.
const flowSlots = 8

// The shared path's verdicts.
const (
	sharedOK     = "ok"     // claimed on the shared path
	sharedStatic = "static" // the settings rule it out: small limits, fair_by, paused
	sharedRated  = "rated"  // rate limited, and the claim takes no tokens: claimRated
	sharedNear   = "near"   // the running count is too close to a limit now
	// sharedKeyed (claim_keyed.go): the key limits are small, max_running far
)

// sharedVerdictSQL decides, with a snapshot taken after the gate and the
// slot are held, whether this claim may take the shared path, and tells
// the claim statement through a transaction-local setting. $2 is
// flowSlots × the largest shared claim; $3 whether the claim takes its
// tokens in its statement (a rate-limited queue's claims must: claimRated); $4 the
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
var sharedVerdictSQL = `WITH q0 AS (SELECT paused OR fair_by <> '' OR key_rated AS other, rate_per_second > 0 AS rated, xmin::text AS ver,
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
	ELSE (SELECT count(*) FROM {s}.tasks t WHERE t.queue = $1 AND t.ist = 'running')
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
func (s *Store) claimShared(ctx context.Context, conn *pgx.Conn, c claimCall) ([]*norn.Task, string, error) {
	slots, cap := s.flow.margins()
	s.flow.sqlOnce.Do(s.buildFlowSQL)
	// The plain claim with ready rows, on the verdict's condition
	// (claimQueue has why the rows it locks adapt).
	readyRows := s.readyRows.get(c.queue)
	b := &pgx.Batch{}
	b.Queue(sharedLockSQL, s.channel+"/flow/"+c.queue, s.channel+"/flowslot/"+c.queue, slots)
	verdictQ := b.Queue(s.q(sharedVerdictSQL), c.queue, slots*cap, false, int64(min(c.want, cap)))
	claimQ := b.Queue(s.flow.leaseSQL, c.queue, min(c.want, cap), s.clockNow(), c.worker, c.timeout, s.cfg.HistoryLimit, readyRows)
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
	if len(out) < min(c.want, cap) && verdict == sharedOK {
		readyRows = min(readyRows*4, maxReadyRows)
	}
	s.readyRows.set(c.queue, readyRows, len(out) == min(c.want, cap))
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
	WHERE t.ist = 'ready' AND t.queue = $1
	ORDER BY t.priority DESC, t.ready_at, t.id LIMIT $2 FOR UPDATE SKIP LOCKED)`) + claimOrder
	s.buildKeyedSQL()
}

// scanVerdict reads the verdict statement's row: the verdict, whether it
// counted the running tasks, and the settings it made. No queues row:
// nothing to claim here (static).
func scanVerdict(row pgx.Row) (verdict string, counted bool, err error) {
	verdict = sharedStatic
	dest := make([]any, 3+strings.Count(claimSetupGUCs, "set_config("))
	dest[0], dest[1] = &verdict, &counted // the settings' columns are skipped (nil)
	if err := row.Scan(dest...); err != nil && err != pgx.ErrNoRows {
		return "", false, err
	}
	return verdict, counted, nil
}
