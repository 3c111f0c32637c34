package embedded

import (
	"encoding/binary"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nornq/norn"
)

// Per-key rate limits (norn.QueueFlow.KeyRateLimit, KeySettings.RateLimit).
// A key's bucket lives in queue.keyBuckets (absent: full) and is written,
// in the claim's batch, under 'y' + queue + 0x00 + key whenever a claim
// takes its tokens, so a restart cannot hand out a fresh burst. A claim
// whose first group has no whole token starves it: the group leaves the
// top heap (keyGroup.eligible) until its next token is due, and the claim
// goes on with the next group, so a key without tokens costs one heap
// removal per token period, not a look at each of its tasks. Claims revive
// the groups whose time has come before they take tasks (revive), and a
// long poll sleeps no longer than to the first of them (tx.tokenIn). The
// sweep forgets the buckets that refilled to their burst.

const pfxKeyBucket = 'y'

func keyBucketKey(queue, key string) []byte {
	k := make([]byte, 0, 2+len(queue)+len(key))
	k = append(k, pfxKeyBucket)
	k = append(k, queue...)
	k = append(k, 0)
	return append(k, key...)
}

// rate is the key rate limit of g's tasks (a queue fair by a label has no
// key rate limits, so g.key is a concurrency key whenever one applies).
func (g *keyGroup) rate() norn.RateLimit {
	var ks *norn.KeySettings
	if g.hasSettings {
		ks = &g.settings
	}
	return g.q.flow.KeyRateFor(g.key, ks)
}

// keyBucket returns key's bucket under rl refilled to now.
func (q *queue) keyBucket(key string, rl norn.RateLimit, now int64) norn.Bucket {
	b := q.keyBuckets[key]
	if b == nil {
		return rl.FullBucket(fromNanos(now))
	}
	return rl.Refill(*b, fromNanos(now))
}

// setKeyBucket stores key's bucket in memory and in the transaction's
// batch.
func (tx *txn) setKeyBucket(q *queue, key string, b norn.Bucket) {
	old, had := q.keyBuckets[key]
	tx.onUndo(func() {
		if had {
			q.keyBuckets[key] = old
		} else {
			delete(q.keyBuckets, key)
		}
	})
	if q.keyBuckets == nil {
		q.keyBuckets = map[string]*norn.Bucket{}
	}
	q.keyBuckets[key] = &b
	tx.b.Set(keyBucketKey(q.name, key), encodeBucket(b), nil)
}

// takeKeyToken takes one token of g's key for a claim of its first task;
// false (and g starved) when the key has none now.
func (tx *txn) takeKeyToken(g *keyGroup) bool {
	rl := g.rate()
	if rl.PerSecond <= 0 {
		return true
	}
	q := g.q
	b := q.keyBucket(g.key, rl, tx.now)
	if b.Whole() < 1 {
		tx.starve(g, nanos(b.At)+int64(rl.NextToken(b)))
		return false
	}
	_, b = rl.Take(b, fromNanos(tx.now), 1)
	tx.setKeyBucket(q, g.key, b)
	return true
}

// starve takes g out of the top heap until the time until (ns).
func (tx *txn) starve(g *keyGroup, until int64) {
	q := g.q
	g.starved, g.starvedUntil = true, until
	q.starved = append(q.starved, g)
	q.fixGroup(g)
	tx.onUndo(func() {
		if i := slices.Index(q.starved, g); i >= 0 {
			q.starved = slices.Delete(q.starved, i, i+1)
		}
		g.starved = false
		q.fixGroup(g)
	})
	tx.noteToken(until)
}

// noteToken bounds the claim's long poll by the time until (ns) a token
// comes.
func (tx *txn) noteToken(until int64) {
	if d := max(until-tx.now, 1); tx.tokenIn == 0 || time.Duration(d) < tx.tokenIn {
		tx.tokenIn = time.Duration(d)
	}
}

// revive puts back the starved groups of q whose next token is due, and
// notes when the others' comes. It is not undone: a revived group is one
// a claim may look at again, which is always sound.
func (tx *txn) revive(q *queue) {
	if len(q.starved) == 0 {
		return
	}
	keep := q.starved[:0]
	for _, g := range q.starved {
		switch {
		case !g.starved:
		case g.starvedUntil <= tx.now || g.rate().PerSecond <= 0:
			g.starved = false
			q.fixGroup(g)
		default:
			tx.noteToken(g.starvedUntil)
			keep = append(keep, g)
		}
	}
	clear(q.starved[len(keep):])
	q.starved = keep
}

// reviveAll puts back every starved group of q (its rate limits changed);
// the next claim starves again those without tokens.
func (q *queue) reviveAll() {
	for _, g := range q.starved {
		g.starved = false
		q.fixGroup(g)
	}
	q.starved = nil
}

// backOffKey empties the bucket of the key of t (snoozed with scope "key")
// until at (ns).
func (tx *txn) backOffKey(t *task, at int64) error {
	q, g := t.q, t.g
	key := ""
	if g != q.nokey {
		key = g.key
	}
	rl := g.rate()
	if key == "" || rl.PerSecond <= 0 {
		return norn.NoKeyRate(q.name, key)
	}
	tx.setKeyBucket(q, key, norn.KeyBackoff(rl, fromNanos(at), fromNanos(tx.now)))
	return nil
}

// keyPruneEvery is how often the sweep looks for full key buckets: it
// reads every stored bucket under the store's lock, and a full bucket
// kept a little longer costs only its entry.
const keyPruneEvery = int64(10 * time.Second)

// pruneKeyBuckets forgets, in every queue, the key buckets that have
// refilled to their burst (the same as none), at most every
// keyPruneEvery; the sweep runs it.
func (tx *txn) pruneKeyBuckets() {
	if tx.now-tx.s.keyPruned < keyPruneEvery {
		return
	}
	tx.s.keyPruned = tx.now
	for _, q := range tx.s.queues {
		for key, b := range q.keyBuckets {
			g := q.keys[key]
			var rl norn.RateLimit
			if g != nil {
				rl = g.rate()
			} else {
				rl = q.flow.KeyRateFor(key, nil)
			}
			if rl.PerSecond > 0 && rl.Refill(*b, fromNanos(tx.now)).Tokens < float64(rl.Burst) {
				continue
			}
			delete(q.keyBuckets, key)
			tx.onUndo(func() { q.keyBuckets[key] = b })
			tx.b.Delete(keyBucketKey(q.name, key), nil)
		}
	}
}

// loadKeyBuckets reads the stored key buckets at open.
func (s *Store) loadKeyBuckets() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{pfxKeyBucket}, UpperBound: []byte{pfxKeyBucket + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		k, v := it.Key()[1:], it.Value()
		i := slices.Index(k, 0)
		if i < 0 || len(v) != 16 {
			return errCorrupt
		}
		q := s.queue(string(k[:i]))
		if q.keyBuckets == nil {
			q.keyBuckets = map[string]*norn.Bucket{}
		}
		q.keyBuckets[string(k[i+1:])] = &norn.Bucket{Tokens: math.Float64frombits(binary.BigEndian.Uint64(v)),
			At: fromNanos(int64(binary.BigEndian.Uint64(v[8:])))}
	}
	return it.Error()
}
