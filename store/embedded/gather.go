package embedded

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nornq/norn"
)

// gather counts what a batch claim (norn.ClaimRequest.Min) decides on:
// the ready tasks of the claim's queues, up to req.Min, and when the one
// ready longest became ready. Callers hold s.mu.
func (s *Store) gather(req *norn.ClaimRequest) (ready int, oldest int64) {
	for _, name := range req.Queues {
		q := s.queues[name]
		if q == nil || q.paused {
			continue
		}
		ready += int(q.counts[stReady])
	}
	if ready >= req.Min {
		return ready, 0
	}
	// Fewer than Min (at most a thousand) are ready: look at each.
	for _, name := range req.Queues {
		q := s.queues[name]
		if q == nil || q.paused {
			continue
		}
		q.nokey.ready.each(func(e *readyEnt) { oldest = earliest(oldest, e.readyAt) })
		for _, g := range q.keys {
			g.ready.each(func(e *readyEnt) { oldest = earliest(oldest, e.readyAt) })
		}
	}
	return ready, oldest
}

func earliest(a, b int64) int64 {
	if a == 0 || b < a {
		return b
	}
	return a
}

// each calls fn with every live entry.
func (r *readyQueue) each(fn func(*readyEnt)) {
	for i := range r.heap {
		fn(&r.heap[i])
	}
	if r.live == 0 {
		return
	}
	for i := r.front; i < len(r.run); i++ {
		if !r.run[i].dead {
			fn(&r.run[i])
		}
	}
}

// gathered applies norn's decision to the store's state: whether a batch
// claim takes tasks now and, when not, how long until it should look
// again by itself (0: only when woken).
func (tx *txn) gathered(req *norn.ClaimRequest) (bool, time.Duration) {
	if req.Min <= 1 {
		return true, 0
	}
	ready, oldest := tx.s.gather(req)
	now := fromNanos(tx.now)
	take, retry := req.Gathered(ready, fromNanos(oldest), now)
	if take || retry.IsZero() {
		return take, 0
	}
	return false, retry.Sub(now)
}

// Group claims (norn.ClaimRequest.GroupBy). What a claim groups by is
// usually what the queue's key groups already are (its concurrency keys,
// or the label it is fair by): then a group is a keyGroup, its count is
// the group's ready queue's length, and choosing costs O(eligible groups
// × the claim's queues + Min for each group still short of Min), reading
// no task. Otherwise (a label the queue is not fair by, or concurrency
// keys in a queue fair by a label) the claim reads the submit record of
// every ready task of that queue: O(its ready tasks) per claim; making
// the queue fair by the same label makes such claims cheap again.

// groupCand is one group a group claim may take, with where its first
// claimable task stands in claim order.
type groupCand struct {
	value string
	stats norn.GroupStats
	qi    int       // index of the queue of its first claimable task
	g     *keyGroup // that task's group when the queue groups as the claim does
	first readyEnt  // otherwise the task itself
}

// groupsAsClaim reports whether q's key groups are the claim's groups.
func groupsAsClaim(q *queue, req *norn.ClaimRequest) bool {
	if q.flow.GroupsByLabel() {
		return q.flow.FairBy == req.GroupBy
	}
	return req.GroupBy == norn.FairByConcurrencyKey
}

// groupValue reads the value t has under req.GroupBy: its concurrency
// key from its submit record, or a label's current value (labels an
// update or a debounce replaced, else those submitted). Only a queue's
// own groups (a label it is fair by: groupsAsClaim) keep the value the
// task entered the queue with.
func (tx *txn) groupValue(t *task, req *norn.ClaimRequest) (string, error) {
	if label, ok := (norn.QueueFlow{FairBy: req.GroupBy}).FairLabel(); ok {
		v, closer, err := tx.s.db.Get(taskKey(t.id, sufLabels))
		if err == nil {
			defer closer.Close()
			labels, err := decodeLabels(v)
			if err != nil {
				return "", fmt.Errorf("task %q: %w", t.id, err)
			}
			return labels[label], nil
		}
		if !errors.Is(err, pebble.ErrNotFound) {
			return "", err
		}
	}
	v, closer, err := tx.s.db.Get(taskKey(t.id, sufImmutable))
	if err != nil {
		return "", err
	}
	defer closer.Close()
	im, err := decodeImmutable(v, false, req.GroupBy != norn.FairByConcurrencyKey)
	if err != nil {
		return "", fmt.Errorf("task %q: %w", t.id, err)
	}
	return req.GroupOf(im.key, im.labels), nil
}

// open reports whether a claim may take a task of q now (it may still
// hold only tasks of keys at their limit: q.top then is empty).
func (tx *txn) open(q *queue) bool {
	return q.claimable() && (!q.flow.RateLimited() || q.bucketNow(tx.now).Whole() > 0)
}

// noteNextToken makes a waiting claim look again when q's rate limit, if
// it is what keeps q's ready tasks back, gives a token (as claimed does
// for the plain claim).
func (tx *txn) noteNextToken(q *queue) {
	if !q.flow.RateLimited() {
		return
	}
	if d := q.flow.RateLimit.NextToken(q.bucketNow(tx.now)); d > 0 && (tx.tokenIn == 0 || d < tx.tokenIn) {
		tx.tokenIn = d
	}
}

// claimGroup is claim for a request with GroupBy: it chooses a group
// (norn.ClaimRequest.ChooseGroup) and takes only that group's tasks, in
// claim order, within every limit. When it chooses none, retry is how
// long until a group's linger ends (0: only when woken).
func (tx *txn) claimGroup(req *norn.ClaimRequest) (out []*task, retry time.Duration, err error) {
	cands, scanned, err := tx.groupCands(req)
	if err != nil {
		return nil, 0, err
	}
	stats := make([]norn.GroupStats, len(cands))
	for i, c := range cands {
		stats[i] = c.stats
	}
	now := fromNanos(tx.now)
	i, due := req.ChooseGroup(stats, now)
	tx.seen(req.Worker)
	if i < 0 {
		if due.IsZero() {
			return nil, 0, nil
		}
		return nil, due.Sub(now), nil
	}
	return tx.takeGroup(req, cands[i].value, scanned), 0, nil
}

// groupTally gathers a group claim's candidates by value.
type groupTally struct {
	byValue map[string]*groupCand
}

func (g *groupTally) add(v string) *groupCand {
	c := g.byValue[v]
	if c == nil {
		c = &groupCand{value: v, qi: -1}
		g.byValue[v] = c
	}
	return c
}

func (g *groupTally) count(c *groupCand, e *readyEnt) {
	c.stats.Ready++
	if c.stats.Oldest.IsZero() || e.readyAt < nanos(c.stats.Oldest) {
		c.stats.Oldest = fromNanos(e.readyAt)
	}
}

// groupCands lists the groups a group claim may take, in the order of
// their first claimable task, with their counts over the claim's queues,
// and the values of the tasks it read from records (per queue index).
func (tx *txn) groupCands(req *norn.ClaimRequest) ([]*groupCand, map[int]map[*task]string, error) {
	s := tx.s
	tally := &groupTally{byValue: map[string]*groupCand{}}
	scanned := map[int]map[*task]string{}
	for qi, name := range req.Queues {
		q := s.queues[name]
		if q == nil || q.paused {
			continue
		}
		tx.revive(q) // keys whose rate limit has a token again
		canTake := tx.open(q)
		if !canTake && q.counts[stReady] > 0 {
			tx.noteNextToken(q)
		}
		if groupsAsClaim(q, req) {
			if canTake {
				for _, g := range q.top {
					if c := tally.add(g.key); c.qi < 0 {
						c.qi, c.g = qi, g
					} else if c.qi == qi && topLess(g, c.g) {
						c.g = g
					}
				}
			}
			continue
		}
		vals, err := tx.scanGroups(q, qi, req, canTake, tally)
		if err != nil {
			return nil, nil, err
		}
		scanned[qi] = vals
	}
	var cands []*groupCand
	// Counts from the queues whose key groups are the claim's groups.
	for v, c := range tally.byValue {
		if c.qi < 0 {
			continue // no task of it can be taken now
		}
		cands = append(cands, c)
		for _, name := range req.Queues {
			q := s.queues[name]
			if q == nil || q.paused || !groupsAsClaim(q, req) {
				continue
			}
			g := q.keys[v]
			if v == "" {
				g = q.nokey
			}
			if g == nil || g.ready.len() == 0 {
				continue
			}
			if n := g.ready.len(); n >= req.Min {
				c.stats.Ready += n
				continue
			}
			g.ready.each(func(e *readyEnt) { tally.count(c, e) })
		}
	}
	slices.SortFunc(cands, func(a, b *groupCand) int {
		switch {
		case a.qi != b.qi:
			return a.qi - b.qi
		case a.g != nil:
			if topLess(a.g, b.g) {
				return -1
			}
			return 1
		case entLess(&a.first, &b.first):
			return -1
		}
		return 1
	})
	return cands, scanned, nil
}

// scanGroups reads the group value of every ready task of q (index qi in
// the claim), a queue whose key groups are not the claim's, counting each
// in tally; it returns the values read.
func (tx *txn) scanGroups(q *queue, qi int, req *norn.ClaimRequest, canTake bool, tally *groupTally) (map[*task]string, error) {
	vals := map[*task]string{}
	var scanErr error
	each := func(g *keyGroup) {
		claimable := canTake && g.topIdx >= 0
		g.ready.each(func(e *readyEnt) {
			if scanErr != nil {
				return
			}
			v, err := tx.groupValue(e.t, req)
			if err != nil {
				scanErr = err
				return
			}
			vals[e.t] = v
			c := tally.add(v)
			tally.count(c, e)
			if claimable && (c.qi < 0 || c.qi == qi && entLess(e, &c.first)) {
				c.qi, c.first = qi, *e
			}
		})
	}
	each(q.nokey)
	for _, g := range q.keys {
		each(g)
	}
	return vals, scanErr
}

// takeGroup takes the tasks of group v from the claim's queues in order,
// up to req.N, within every limit.
func (tx *txn) takeGroup(req *norn.ClaimRequest, v string, scanned map[int]map[*task]string) []*task {
	var out []*task
	for qi, name := range req.Queues {
		if len(out) == req.N {
			break
		}
		q := tx.s.queues[name]
		if q == nil || q.paused || !tx.open(q) {
			continue
		}
		if vals := scanned[qi]; vals != nil {
			out = tx.takeScanned(q, req, vals, v, out)
			continue
		}
		g := q.keys[v]
		if v == "" {
			g = q.nokey
		}
		if g == nil || g.topIdx < 0 {
			continue
		}
		p := tx.plan(q, req.N-len(out))
		p.ready = g.ready.len()
		n0 := len(out)
		for len(out) < req.N && g.topIdx >= 0 && q.claimable() && (p.tokens < 0 || len(out)-n0 < p.tokens) {
			if t := tx.take(g.ready.first().t, req); t != nil {
				out = append(out, t)
			}
		}
		tx.claimed(q, p, len(out)-n0)
	}
	return out
}

// takeScanned takes the ready tasks of q whose value (vals) is v, in
// claim order (priority, ready time, id), each while its key is below its
// limit.
func (tx *txn) takeScanned(q *queue, req *norn.ClaimRequest, vals map[*task]string, v string, out []*task) []*task {
	var es []readyEnt
	for t, tv := range vals {
		if tv == v && t.g.topIdx >= 0 {
			es = append(es, *t.g.ready.entry(t))
		}
	}
	slices.SortFunc(es, func(a, b readyEnt) int {
		if entLess(&a, &b) {
			return -1
		}
		return 1
	})
	p := tx.plan(q, req.N-len(out))
	p.ready = len(es)
	n0 := len(out)
	for _, e := range es {
		if len(out) == req.N || !q.claimable() || p.tokens >= 0 && len(out)-n0 >= p.tokens {
			break
		}
		if e.t.g.topIdx < 0 {
			continue // its key reached its limit
		}
		if t := tx.take(e.t, req); t != nil {
			out = append(out, t)
		}
	}
	tx.claimed(q, p, len(out)-n0)
	return out
}
