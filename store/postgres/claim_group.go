package postgres

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Group claims (norn.ClaimRequest.GroupBy): the answer holds the tasks of
// one group only, chosen by norn.ClaimRequest.ChooseGroup from each
// group's ready tasks across the claim's queues. Choosing needs to know
// which tasks the limits let a claim take now (a group whose every task
// is held back cannot answer), and the counts of every queue at once, so
// a group claim is an exclusive claim of all its queues together: one
// transaction takes each queue's gate exclusively (in name order, so two
// group claims never wait for each other in a cycle), settles and reads
// each one's head as the exclusive path does (queueGateReads), reads the
// first groupWindow ready tasks of each with their group's value, chooses,
// and claims the chosen group's tasks through each queue's limited pick.
// It sees only the window: a group whose tasks all lie past it does not
// count, and an answer takes at most what the windows hold. Group claims
// of a queue run one at a time across the cluster, like its exclusive
// claims.

// groupWindow is how many ready tasks of each queue a group claim reads:
// enough for its claim, and for min, several times over.
func groupWindow(req *norn.ClaimRequest) int {
	return min(max(4*req.N+16, 4*req.Min), 10_000)
}

// groupCand is a ready task read by a group claim, with its group's value.
type groupCand struct {
	readyCand
	value string
}

// claimGrouped claims for a request with GroupBy. When no group may
// answer, retry is when one would by itself (a linger ends; zero: only
// new tasks change the answer).
func (s *Store) claimGrouped(ctx context.Context, req norn.ClaimRequest) (out []*norn.Task, retry time.Time, err error) {
	var timeout *int64
	if req.Timeout > 0 {
		ns := int64(req.Timeout)
		timeout = &ns
	}
	queues := norn.DistinctQueues(req.ClaimOrder(rand.Float64))
	err = s.withConn(ctx, func(conn *pgx.Conn) (err error) {
		defer func() {
			if err != nil && !conn.IsClosed() && conn.PgConn().TxStatus() != 'I' {
				_, _ = conn.Exec(ctx, "ROLLBACK")
			}
		}()
		views, windows, err := s.readGroupHeads(ctx, conn, queues, &req)
		if err != nil {
			return err
		}
		value, ok, due := chooseGroup(&req, views, windows)
		retry = due
		if !ok {
			_, err = conn.Exec(ctx, "COMMIT")
			return err
		}
		out, err = s.takeGroup(ctx, conn, &req, queues, views, windows, value, timeout)
		return err
	})
	return out, retry, err
}

// readGroupHeads begins the group claim's transaction, takes the gates of
// queues and reads each one's gateView and window, in one round trip.
func (s *Store) readGroupHeads(ctx context.Context, conn *pgx.Conn, queues []string, req *norn.ClaimRequest) ([]*gateView, [][]groupCand, error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for _, q := range slices.Sorted(slices.Values(queues)) {
		b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, s.channel+"/flow/"+q)
	}
	b.Queue(noSeqScanSQL)
	var label *string
	if l, ok := (norn.QueueFlow{FairBy: req.GroupBy}).FairLabel(); ok {
		label = &l
	}
	n := groupWindow(req)
	views := make([]*gateView, len(queues))
	windows := make([][]groupCand, len(queues))
	for i, q := range queues {
		views[i] = s.queueGateReads(b, q, n)
		// A label's value: the queue's own group (fair_key) when the queue
		// is fair by that label, else the label's current value.
		b.Queue(s.q(`SELECT t.id, coalesce(t.concurrency_key, ''), t.priority, t.ready_at,
	coalesce(CASE WHEN $3::text IS NULL THEN t.concurrency_key
		WHEN (SELECT q.fair_by FROM {s}.queues q WHERE q.name = $1) = 'label:' || $3::text THEN nullif(t.fair_key, '')
		ELSE t.labels ->> $3::text END, '')
FROM {s}.tasks t WHERE t.ist = 'ready' AND t.queue = $1
ORDER BY t.priority DESC, t.ready_at, t.id LIMIT $2`), q, n, label).Query(func(rows pgx.Rows) error {
			var c groupCand
			_, err := pgx.ForEachRow(rows, []any{&c.id, &c.key, &c.priority, &c.readyAt, &c.value}, func() error {
				windows[i] = append(windows[i], c)
				return nil
			})
			return err
		})
	}
	return views, windows, conn.SendBatch(ctx, b).Close()
}

// groupPick is one queue's limited pick for a group claim (nil: the
// queue gives nothing now: paused, or out of its rate limit's tokens).
func groupPick(g *gateView, want int) *limitedPick {
	if g.paused {
		return nil
	}
	if g.flow.RateLimited() {
		want = min(want, g.bucket.bucket(g.flow.RateLimit).Whole())
	}
	if want <= 0 {
		return nil
	}
	running := make(map[string]int64, len(g.running))
	for k, n := range g.running {
		running[k] = n
	}
	return &limitedPick{flow: g.flow, own: g.own, running: running, total: g.total, want: want, tokens: g.tokensFor()}
}

// chooseGroup chooses the group from the windows: the candidates are the
// groups with a task the limits let this claim take, in the order of
// their first such task (queues in claim order, then claim order); each
// one's counts are over every window.
func chooseGroup(req *norn.ClaimRequest, views []*gateView, windows [][]groupCand) (string, bool, time.Time) {
	stats := map[string]*norn.GroupStats{}
	var order []string
	for i, w := range windows {
		if views[i].paused {
			continue
		}
		p := groupPick(views[i], req.N)
		for _, c := range w {
			st := stats[c.value]
			if st == nil {
				st = &norn.GroupStats{}
				stats[c.value] = st
			}
			st.Ready++
			if st.Oldest.IsZero() || c.readyAt.Before(st.Oldest) {
				st.Oldest = c.readyAt
			}
			if p != nil && p.room(c.key) != 0 && !slices.Contains(order, c.value) {
				order = append(order, c.value)
			}
		}
	}
	list := make([]norn.GroupStats, len(order))
	for i, v := range order {
		list[i] = *stats[v]
	}
	i, retry := req.ChooseGroup(list, views[0].bucket.now)
	if i < 0 {
		return "", false, retry
	}
	return order[i], true, time.Time{}
}

// takeGroup claims the tasks of the group value from each queue's window
// in claim order, through each queue's limited pick, writes what the
// limits need (slot admissions, key buckets, the rate bucket) and
// commits.
func (s *Store) takeGroup(ctx context.Context, conn *pgx.Conn, req *norn.ClaimRequest, queues []string, views []*gateView,
	windows [][]groupCand, value string, timeout *int64) ([]*norn.Task, error) {
	var out []*norn.Task
	fb := &pgx.Batch{}
	got := make([]int, len(queues))
	taken := 0
	for i, q := range queues {
		g := views[i]
		p := groupPick(g, req.N-taken)
		if p == nil {
			continue
		}
		for _, c := range windows[i] {
			if c.value == value {
				p.offer(c.readyCand)
			}
		}
		if len(p.taken) == 0 {
			continue
		}
		taken += len(p.taken)
		g.keyTokens.queueWrites(s, fb, q)
		if countLimited(g.flow, g.own) {
			fb.Queue(s.q(bumpSlotSQL), q, int64(len(p.taken)))
		}
		fb.Queue(s.sql.claimIDs, p.taken, len(p.taken), g.bucket.now, req.Worker, timeout, s.cfg.HistoryLimit).Query(func(rows pgx.Rows) error {
			ts, err := collectClaimedRows(rows)
			got[i] = len(ts)
			out = append(out, ts...)
			return err
		})
	}
	if fb.Len() > 0 {
		if err := conn.SendBatch(ctx, fb).Close(); err != nil {
			return nil, err
		}
	}
	for i, q := range queues {
		if g := views[i]; g.flow.RateLimited() && got[i] > 0 {
			if err := s.settleClaim(ctx, conn, q, g.flow, g.bucket, got[i], got[i], -1, -1); err != nil {
				return nil, err
			}
		}
	}
	_, err := conn.Exec(ctx, "COMMIT")
	return out, err
}
