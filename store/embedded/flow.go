package embedded

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nornq/norn"
)

// Flow control in memory. A queue's ready tasks are split by concurrency
// key: each key group has its own ready queue, and the queue's top heap
// holds every group that may run another task (it has ready tasks and is
// below its key limit), ordered by the group's first task. A claim takes
// the first task of the first group — the same task one heap over every
// ready task would give, minus those of keys at their limit — in
// O(log keys + log tasks of the key), however many tasks blocked keys have
// waiting. A group at its limit leaves the top heap and comes back when
// one of its running tasks ends. Tasks without a key form the queue's
// nokey group, which only max_running limits.
//
// Fair claiming (fair_by) uses the same groups, keyed by the fair key: the
// concurrency key, or for fair_by label:NAME the task's label NAME as
// submitted (such a queue has no key limits, so its groups need not count
// concurrency keys). The top heap orders groups by their first task's
// priority, then by the group's virtual time, then by the first task: a
// claim takes from the group with the best priority and the least
// virtual time and advances that group by norn.FairStride of its weight,
// so equal-priority groups take turns in proportion to their weights. A
// group that enters the top heap starts no earlier than the virtual time
// of the group claimed last (fairNow), so it is claimed within one round
// of the groups, whatever their backlogs. Outside fair queues every
// virtual time stays 0 and the order is plain claim order. A claim is
// O(log groups + log tasks of its group), as before.

// keyGroup is one concurrency key of a queue.
type keyGroup struct {
	key     string
	q       *queue
	ready   readyQueue
	head    readyEnt // copy of ready.first() while in the top heap
	running int64
	tasks   int64 // tasks in memory with this key (any status)
	// settings are the key's own (hasSettings: stored under a 'k' key).
	settings    norn.KeySettings
	hasSettings bool
	topIdx      int
	// vt is the group's virtual time in a fair queue (0 otherwise).
	vt int64
	// starved: the key's rate limit has no token for it until
	// starvedUntil (keyrate.go).
	starved      bool
	starvedUntil int64
}

// limit is the key's running limit, 0 for none.
func (g *keyGroup) limit() int {
	var ks *norn.KeySettings
	if g.hasSettings {
		ks = &g.settings
	}
	return g.q.flow.KeyLimitFor(g.key, ks)
}

func (g *keyGroup) eligible() bool {
	if g.ready.len() == 0 || g.starved {
		return false
	}
	l := g.limit()
	return l == 0 || g.running < int64(l)
}

// groupHeap orders the groups that may run a task by their first ready
// task, as readyHeap orders tasks.
type groupHeap []*keyGroup

func (h groupHeap) Len() int           { return len(h) }
func (h groupHeap) Less(i, j int) bool { return topLess(h[i], h[j]) }

// topLess orders two groups of a queue's top heap: a before b when a
// claim takes from a first.
func topLess(a, b *keyGroup) bool {
	if c := norn.FairFirst(int64(a.head.priority), a.vt, int64(b.head.priority), b.vt); c != 0 {
		return c < 0
	}
	return entLess(&a.head, &b.head)
}
func (h groupHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].topIdx = i
	h[j].topIdx = j
}
func (h *groupHeap) Push(x any) {
	g := x.(*keyGroup)
	g.topIdx = len(*h)
	*h = append(*h, g)
}
func (h *groupHeap) Pop() any {
	old := *h
	n := len(old)
	g := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	g.topIdx = -1
	return g
}

// group returns the queue's group for key, creating it.
func (q *queue) group(key string) *keyGroup {
	if key == "" {
		return q.nokey
	}
	g := q.keys[key]
	if g == nil {
		g = &keyGroup{key: key, q: q, topIdx: -1}
		q.keys[key] = g
	}
	return g
}

// fixGroup puts g in, moves it within, or takes it out of the top heap
// after its ready tasks, running count or limit changed.
func (q *queue) fixGroup(g *keyGroup) {
	if !g.eligible() {
		if g.topIdx >= 0 {
			heap.Remove(&q.top, g.topIdx)
		}
		return
	}
	g.head = *g.ready.first()
	if g.topIdx >= 0 {
		heap.Fix(&q.top, g.topIdx)
	} else {
		if q.flow.FairBy != "" && g.vt < q.fairNow {
			g.vt = q.fairNow // no credit saved up while it had nothing to run
		}
		heap.Push(&q.top, g)
	}
}

// chargeFair advances the virtual time of g, whose first ready task a claim
// is about to take, in a fair queue.
func (tx *txn) chargeFair(g *keyGroup) {
	q := g.q
	if q.flow.FairBy == "" {
		return
	}
	vt, now := g.vt, q.fairNow
	tx.onUndo(func() {
		g.vt, q.fairNow = vt, now
		if g.topIdx >= 0 {
			heap.Fix(&q.top, g.topIdx)
		}
	})
	q.fairNow = g.vt
	g.vt += norn.FairStride(g.settings.Weight)
}

// groupKey is the key a new task of q is grouped by.
func (q *queue) groupKey(n *norn.NewTask) string {
	if q.flow.GroupsByLabel() {
		return q.flow.FairKey(n.ConcurrencyKey, n.Labels)
	}
	return n.ConcurrencyKey
}

// labelGroup returns the group of a task of q, a queue fair by a label,
// from its submit record.
func (q *queue) labelGroup(imm []byte) (*keyGroup, error) {
	im, err := decodeImmutable(imm, false, true)
	if err != nil {
		return nil, err
	}
	return q.group(q.flow.FairKey(im.key, im.labels)), nil
}

// keyRates reports whether any key of q has its own rate limit.
func (q *queue) keyRates() bool {
	for _, g := range q.keys {
		if g.hasSettings && g.settings.RateLimit.PerSecond > 0 {
			return true
		}
	}
	return false
}

// keyLimits reports whether any key of q has its own running limit.
func (q *queue) keyLimits() bool {
	for _, g := range q.keys {
		if g.hasSettings && g.settings.Limit > 0 {
			return true
		}
	}
	return false
}

// setFlow applies new flow settings to q. When the groups change meaning
// (concurrency keys or one label's values), every task of q moves to its
// new group, reading its key from its submit record: O(tasks in memory),
// once per such change. Virtual times restart from 0.
func (tx *txn) setFlow(q *queue, f norn.QueueFlow) error {
	old := q.flow
	if f == old {
		return nil
	}
	regroup := f.GroupsByLabel() != old.GroupsByLabel() || f.GroupsByLabel() && f.FairBy != old.FairBy
	type moved struct {
		t   *task
		key string
	}
	var moves []moved
	if regroup {
		for t := range tx.s.tasks.all() {
			if t.q != q {
				continue
			}
			v, closer, err := tx.s.db.Get(taskKey(t.id, sufImmutable))
			if err != nil {
				return err
			}
			im, err := decodeImmutable(v, false, f.GroupsByLabel())
			closer.Close()
			if err != nil {
				return fmt.Errorf("task %q: %w", t.id, err)
			}
			moves = append(moves, moved{t, f.FairKey(im.key, im.labels)})
			if !f.GroupsByLabel() {
				moves[len(moves)-1].key = im.key
			}
		}
	}
	vts := map[*keyGroup]int64{}
	for _, g := range q.keys {
		vts[g] = g.vt
	}
	vts[q.nokey] = q.nokey.vt
	fairNow := q.fairNow
	back := make([]moved, len(moves))
	for i, m := range moves {
		back[i] = moved{m.t, m.t.g.key}
	}
	tx.onUndo(func() {
		q.flow = old
		for _, m := range back {
			q.move(m.t, m.key)
		}
		q.fairNow = fairNow
		for g, vt := range vts {
			g.vt = vt
		}
		q.refixAll()
	})
	q.flow = f
	for _, m := range moves {
		q.move(m.t, m.key)
	}
	q.fairNow = 0
	for _, g := range q.keys {
		g.vt = 0
	}
	q.nokey.vt = 0
	q.refixAll()
	return nil
}

// move puts t in q's group for key.
func (q *queue) move(t *task, key string) {
	g := t.g
	if g.key == key && (key != "" || g == q.nokey) {
		return
	}
	var e readyEnt
	if t.heapIdx != -1 {
		e = *g.ready.entry(t)
		g.ready.remove(t)
	}
	if t.st.status == stRunning {
		g.running--
	}
	g.tasks--
	q.fixGroup(g)
	q.dropGroup(g)
	n := q.group(key)
	if n.tasks == 0 && n != q.nokey {
		q.keys[key] = n
	}
	t.g = n
	n.tasks++
	if t.st.status == stRunning {
		n.running++
	}
	if e.t != nil {
		n.ready.push(e)
	}
	q.fixGroup(n)
}

// dropGroup forgets a group nothing refers to any more.
func (q *queue) dropGroup(g *keyGroup) {
	if g != q.nokey && g.tasks == 0 && !g.hasSettings && q.keys[g.key] == g {
		delete(q.keys, g.key)
	}
}

// refixAll re-evaluates every group after the queue's limits changed.
func (q *queue) refixAll() {
	q.fixGroup(q.nokey)
	for _, g := range q.keys {
		q.fixGroup(g)
	}
}

// claimable reports whether a claim could take a task now.
func (q *queue) claimable() bool {
	if len(q.top) == 0 {
		return false
	}
	return q.flow.MaxRunning == 0 || q.counts[stRunning] < int64(q.flow.MaxRunning)
}

// infoWithKeys is info plus the keys (one queue's view).
func (q *queue) infoWithKeys() norn.QueueInfo {
	qi := q.info()
	qi.Keys = q.keyInfos()
	return qi
}

// keyInfos lists the keys with settings or running tasks, sorted.
func (q *queue) keyInfos() []norn.KeyInfo {
	var out []norn.KeyInfo
	for _, g := range q.keys {
		if g.hasSettings || g.running > 0 {
			out = append(out, norn.KeyInfo{Key: g.key, KeySettings: g.settings, Running: g.running})
		}
	}
	slices.SortFunc(out, func(a, b norn.KeyInfo) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Key settings are stored one per key: 'k' + queue + 0x00 + key → JSON.
// Queue names cannot contain 0x00.
const pfxKeySettings = 'k'

func keySettingsKey(queue, key string) []byte {
	k := make([]byte, 0, 2+len(queue)+len(key))
	k = append(k, pfxKeySettings)
	k = append(k, queue...)
	k = append(k, 0)
	return append(k, key...)
}

// setKeys applies the Keys part of a queue update.
func (tx *txn) setKeys(q *queue, keys map[string]*norn.KeySettings) {
	for key, ks := range keys {
		g := q.group(key)
		old, had := g.settings, g.hasSettings
		tx.onUndo(func() {
			g.settings, g.hasSettings = old, had
			if !had && q.keys[key] == nil {
				q.keys[key] = g
			}
			q.fixGroup(g)
			q.dropGroup(g)
		})
		if ks == nil {
			g.settings, g.hasSettings = norn.KeySettings{}, false
			tx.b.Delete(keySettingsKey(q.name, key), nil)
		} else {
			g.settings, g.hasSettings = ks.Normalized(), true
			j, _ := json.Marshal(g.settings)
			tx.b.Set(keySettingsKey(q.name, key), j, nil)
		}
		q.fixGroup(g)
		q.dropGroup(g)
	}
}

// loadKeySettings reads the stored key settings at open.
func (s *Store) loadKeySettings() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{pfxKeySettings}, UpperBound: []byte{pfxKeySettings + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[1:]
		i := slices.Index(k, 0)
		if i < 0 {
			return errCorrupt
		}
		var ks norn.KeySettings
		if err := json.Unmarshal(it.Value(), &ks); err != nil {
			return errCorrupt
		}
		g := s.queue(string(k[:i])).group(string(k[i+1:]))
		g.settings, g.hasSettings = ks, true
	}
	return it.Error()
}
