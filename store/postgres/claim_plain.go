package postgres

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nornq/norn"
)

// The plain path: a queue without flow limits (or one this node has not
// yet seen limited) is claimed from its ready rows with one lease claim
// statement (batches.go), behind the queue's gate held shared.

// claimOrder puts an assign statement's rows in claim order.
const claimOrder = ` ORDER BY upd.priority DESC, upd.ready_at, upd.id`

// buildAssignKeyedSQL is buildAssignSQLUnordered for the claims of the
// keyed and exclusive flow paths: they also record the task's key in
// running_key, which puts the running task in tasks_running_key, the index
// the keyed path counts a key's running tasks by (claim_keyed.go). Other claims
// leave it alone, so tasks of queues without small key limits cost that
// index nothing.
func (s *Store) buildAssignKeyedSQL(c string) string {
	return s.assignSQL(c, ", running_key = t.concurrency_key")
}

// assignSQL is the claim's UPDATE over the CTE c, with more assignments.
func (s *Store) assignSQL(c, set string) string {
	return s.q(`WITH n AS (SELECT coalesce($3::timestamptz, clock_timestamp()) AS now, 'ready'::text AS ready),
` + c + `,
upd AS (UPDATE {s}.tasks t SET status = 'running', owner = $4, lease = t.lease + 1, attempts = t.attempts + 1,
	deadline = ` + leasedDeadline("n.now", "$5::bigint") + `,
	updated = n.now, version = t.version + 1, history_count = t.history_count + 1,
	assign_seq = t.history_count + 1, claimed_at = n.now` + set + `
	FROM n WHERE t.id = ANY (ARRAY(SELECT c.id FROM c)) AND (t.expires_at IS NULL OR t.expires_at > n.now)
	RETURNING ` + colsClaim + `)` +
		replaceHL(trimHistory, "$6") + `,
w AS (UPDATE {s}.workers w SET last_seen = n.now FROM n WHERE w.id = $4 AND w.last_seen < n.now - interval '1 second')` +
		`, e AS (SELECT 'TaskAssignment'::text AS kind, id, queue, status, version, updated AS time FROM upd)` +
		s.eventsCTE("e") + `
SELECT upd.* FROM upd WHERE (SELECT count(*) FROM nt) >= 0`)
}

// takeClaimed reads a claim statement's rows, puts them in claim order
// and sets queue's claim hint to the first (gen: s.wake's channel taken
// before the claim started).
func (s *Store) takeClaimed(rows pgx.Rows, queue string, gen <-chan struct{}) ([]*norn.Task, error) {
	out, first, err := collectClaimed(rows)
	if first != nil {
		s.setHint(queue, gen, first)
	}
	return out, err
}

// collectClaimed reads a claim statement's rows in claim order; first is
// the first of them (nil: none).
func collectClaimed(rows pgx.Rows) (out []*norn.Task, first *rec, err error) {
	rs, err := collectRecs(rows)
	if err != nil {
		return nil, nil, err
	}
	sortClaimed(rs)
	out = claimedTasks(rs)
	if len(rs) > 0 {
		first = rs[0]
	}
	return out, first, nil
}

// setHint makes the claimed task r queue's claim hint.
func (s *Store) setHint(queue string, gen <-chan struct{}, r *rec) {
	s.hints.set(queue, gen, s.wake.wait(), claimHint{at: time.Now(), priority: int64(r.Priority), readyAt: r.readyAt, id: r.ID})
}

// sortClaimed puts claimed rows in claim order (priority, then ready
// time, then id), the order of tasks_claim.
func sortClaimed(rs []*rec) {
	slices.SortFunc(rs, func(a, b *rec) int {
		return compareClaimOrder(int64(a.Priority), a.readyAt, a.ID, int64(b.Priority), b.readyAt, b.ID)
	})
}

// compareClaimOrder compares two tasks, given by priority, ready time and id, in
// claim order (the order of tasks_claim): higher priority first, then
// earlier ready, then smaller id.
func compareClaimOrder(ap int64, ar time.Time, aid string, bp int64, br time.Time, bid string) int {
	if ap != bp {
		return cmp.Compare(bp, ap)
	}
	if c := ar.Compare(br); c != 0 {
		return c
	}
	return strings.Compare(aid, bid)
}

// claimPlainPath claims from the queue's ready rows. A claim locks a few
// ready rows only (locking more would leave concurrent claimers nothing
// to take): while it gets some but not all it wants, it takes again,
// locking more rows each time, and the queue's next claim starts from what
// sufficed (readyRowLimits). A queue with flow limits yields nothing here:
// the node marks it limited and the claim goes on the path route names.
func (s *Store) claimPlainPath(ctx context.Context, conn *pgx.Conn, c claimCall) ([]*norn.Task, claimPath, error) {
	var out []*norn.Task
	rows := s.readyRows.get(c.queue)
	for len(out) < c.want {
		got, limited, err := s.claimPlain(ctx, conn, c.queue, c.want-len(out), c.worker, c.timeout, rows)
		if err != nil {
			if len(out) > 0 {
				// What the earlier statements claimed is committed: hand
				// it out; the error comes back at the next claim.
				break
			}
			return nil, served, err
		}
		out = append(out, got...)
		if limited {
			s.flow.mark(&s.flow.limited, c.queue, true)
			if len(out) == 0 {
				next, _ := s.flow.route(c.queue)
				return nil, next, nil
			}
		}
		if len(got) == 0 || limited {
			break
		}
		if len(out) < c.want {
			rows = min(rows*4, maxReadyRows)
		}
	}
	s.readyRows.set(c.queue, rows, len(out) == c.want)
	return out, served, nil
}

// claimPlain is one lease claim statement (readyRows: how many ready rows
// it may lock); limited, whether the queue has flow limits (then it
// claimed nothing).
func (s *Store) claimPlain(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64, readyRows int) (out []*norn.Task, limited bool, err error) {
	gen := s.wake.wait()
	b := &pgx.Batch{}
	b.Queue(plainGateSQL, s.channel+"/flow/"+queue)
	b.Queue(s.sql.leaseClaim, queue, want, s.clockNow(), worker, timeout, s.cfg.HistoryLimit, readyRows).Query(func(rows pgx.Rows) (err error) {
		out, err = s.takeClaimed(rows, queue, gen)
		return err
	})
	// In the same round trip: whether flow limits made the claim skip the queue.
	b.Queue(s.q(`SELECT flow_limited AND NOT paused FROM {s}.queues WHERE name = $1`), queue).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&limited); err != nil && err != pgx.ErrNoRows {
			return err
		}
		return nil
	})
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, false, err
	}
	return out, limited && len(out) == 0, nil
}

// collectClaimedRows reads the tasks a claim assigned, in the statement's
// order.
func collectClaimedRows(rows pgx.Rows) ([]*norn.Task, error) {
	d := newRecReader()
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*norn.Task, error) { return claimedRec(d.read(row)) })
}

// claimedRec is the task of a claimed row already read.
func claimedRec(r *rec, err error) (*norn.Task, error) {
	if err != nil {
		return nil, err
	}
	// A fresh task's history, not read back, is just this
	// assignment; an older one's was read with it.
	if r.History == nil {
		r.History = []norn.HistoryEntry{{Type: norn.TaskAssignment, Time: r.Updated, Worker: r.Owner, Lease: r.Lease}}
		r.HistoryDropped = r.historyCount - 1
	}
	return &r.Task, nil
}

// claimedTasks are the tasks of claimed rows (claimedRec).
func claimedTasks(rs []*rec) []*norn.Task {
	out := make([]*norn.Task, len(rs))
	for i, r := range rs {
		out[i], _ = claimedRec(r, nil)
	}
	return out
}

// leasedDeadline is a claimed task's deadline: the claim's time plus its
// lease length ($5, or the task's timeout), capped by its runtime limit.
func leasedDeadline(now, override string) string {
	return now + ` + (CASE WHEN t.max_runtime_ns > 0
		THEN least(coalesce(` + override + `, t.timeout_ns), (t.max_runtime_ns + 999) / 1000 * 1000)
		ELSE coalesce(` + override + `, t.timeout_ns) END / 1000) * interval '1 microsecond'`
}
