package embedded

import (
	"context"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nornq/norn"
)

// Rate limits. A rate-limited queue's token bucket lives in memory
// (queue.bucket, nil while full: nobody claimed yet, or the limit was just
// set) and is written, in the claim's own batch, under 'r' + queue name
// whenever a claim takes tokens: a restart resumes with the bucket as the
// last committed claim left it, so it cannot hand out a fresh burst.

const pfxBucket = 'r'

func bucketKey(queue string) []byte {
	return append([]byte{pfxBucket}, queue...)
}

func encodeBucket(b norn.Bucket) []byte {
	v := make([]byte, 16)
	binary.BigEndian.PutUint64(v, math.Float64bits(b.Tokens))
	binary.BigEndian.PutUint64(v[8:], uint64(b.At.UnixNano()))
	return v
}

// bucketNow returns the queue's bucket refilled to now.
func (q *queue) bucketNow(now int64) norn.Bucket {
	rl := q.flow.RateLimit
	if q.bucket == nil {
		return rl.FullBucket(fromNanos(now))
	}
	return rl.Refill(*q.bucket, fromNanos(now))
}

// claimPlan is what a claim may take from one queue before it starts.
type claimPlan struct {
	want, ready, maxRoom, tokens int
}

// plan notes, before a claim takes tasks from q, what it wants and what
// the limits allow: tokens is -1 without a rate limit.
func (tx *txn) plan(q *queue, want int) claimPlan {
	tx.revive(q)
	p := claimPlan{want: want, ready: int(q.counts[stReady]), maxRoom: -1, tokens: -1}
	if q.flow.MaxRunning > 0 {
		p.maxRoom = max(q.flow.MaxRunning-int(q.counts[stRunning]), 0)
	}
	if q.flow.RateLimited() {
		p.tokens = q.bucketNow(tx.now).Whole()
	}
	return p
}

// claimed settles a claim of got tasks from q under plan p: it takes the
// tokens, counts what the limits held back, and notes when a token comes
// if the rate limit left the claim short.
func (tx *txn) claimed(q *queue, p claimPlan, got int) {
	if p.tokens < 0 && p.maxRoom < 0 && !q.flow.Limited() {
		return
	}
	held := norn.HeldBack(p.want, p.ready, p.maxRoom, p.tokens, got)
	q.held.Add(held)
	if p.tokens < 0 {
		return
	}
	rl := q.flow.RateLimit
	b := q.bucketNow(tx.now)
	if got > 0 {
		_, b = rl.Take(b, fromNanos(tx.now), got)
		old := q.bucket
		q.bucket = &b
		tx.onUndo(func() { q.bucket = old })
		tx.b.Set(bucketKey(q.name), encodeBucket(b), nil)
	}
	if held.RateLimit > 0 {
		if d := rl.NextToken(b); d > 0 && (tx.tokenIn == 0 || d < tx.tokenIn) {
			tx.tokenIn = d
		}
	}
}

// setRateLimit keeps the bucket across a changed limit (the new burst
// caps it) and forgets it when the limit is removed.
func (tx *txn) setRateLimit(q *queue, was norn.RateLimit) {
	if q.flow.RateLimit == was || q.flow.RateLimited() {
		return
	}
	old := q.bucket
	q.bucket = nil
	tx.onUndo(func() { q.bucket = old })
	tx.b.Delete(bucketKey(q.name), nil)
}

// withRate adds the bucket's tokens now to a queue's info.
func (q *queue) withRate(qi norn.QueueInfo, now int64) norn.QueueInfo {
	if q.flow.RateLimited() {
		t := q.bucketNow(now).Tokens
		qi.RateTokens = &t
	}
	return qi
}

// loadBuckets reads the stored buckets at open (after the queues).
func (s *Store) loadBuckets() error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{pfxBucket}, UpperBound: []byte{pfxBucket + 1}})
	if err != nil {
		return err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		v := it.Value()
		if len(v) != 16 {
			return errCorrupt
		}
		q := s.queues[string(it.Key()[1:])]
		if q == nil || !q.flow.RateLimited() {
			continue // written by a claim racing a removal that won: ignore
		}
		b := norn.Bucket{Tokens: math.Float64frombits(binary.BigEndian.Uint64(v)),
			At: fromNanos(int64(binary.BigEndian.Uint64(v[8:])))}
		q.bucket = &b
	}
	return it.Error()
}

// FlowStats reports the queues with limits, and those whose limits held
// tasks back since the store was opened; see norn.FlowReporter.
func (s *Store) FlowStats(ctx context.Context) ([]norn.FlowStat, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	s.mu.Lock()
	var out []norn.FlowStat
	for _, q := range s.queues {
		limited := q.flow.Limited() || q.flow.RateLimited()
		if limited || q.held != (norn.Held{}) {
			st := norn.FlowStat{Queue: q.name, Limited: limited, Held: q.held}
			if limited {
				st.Running = q.counts[stRunning]
			}
			out = append(out, st)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b norn.FlowStat) int { return strings.Compare(a.Queue, b.Queue) })
	return out, nil
}

var _ norn.FlowReporter = (*Store)(nil)

// tokenWait bounds a long poll's sleep by when the next token comes.
func tokenWait(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return nil
	}
	return time.After(d)
}
