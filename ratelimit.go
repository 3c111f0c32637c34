package norn

import (
	"context"
	"math"
	"time"
)

// Rate limits: a queue's claims hand out at most Burst tasks at once and
// PerSecond tasks a second sustained, across the cluster. The store keeps
// one token bucket per rate-limited queue and updates it inside the claim
// (docs/design.md); this file holds the bucket arithmetic both stores use.

// RateLimit is a queue's rate limit. The zero value means none.
type RateLimit struct {
	// PerSecond is the sustained rate in tasks a second (> 0; below 1 is
	// fine: 0.5 is one task every 2 seconds). In an update, 0 removes the
	// limit.
	PerSecond float64 `json:"per_second"`
	// Burst is the bucket's size: how many tasks claims may take at once
	// after a quiet spell (≥ 1). Default (0 in an update): PerSecond
	// rounded up, one second's worth.
	Burst int `json:"burst,omitempty"`
}

// Limits on the values, so the arithmetic stays exact enough and a typo
// (1e12) is caught rather than taken as "no limit".
const (
	MaxRatePerSecond = 1_000_000
	MaxRateBurst     = 1_000_000
	// MinRatePerSecond is one task a day.
	MinRatePerSecond = 1.0 / 86400
)

// IsZero reports whether no rate limit is set.
func (r RateLimit) IsZero() bool { return r.PerSecond == 0 && r.Burst == 0 }

// validate checks a rate limit given in an update; field names it.
func (r RateLimit) validate(field string) error {
	if math.IsNaN(r.PerSecond) || math.IsInf(r.PerSecond, 0) {
		return Invalid(field+".per_second", "must be a finite number")
	}
	if r.PerSecond == 0 {
		if r.Burst != 0 {
			return Invalid(field+".burst", "needs per_second (per_second 0 removes the rate limit)")
		}
		return nil
	}
	if r.PerSecond < 0 {
		return Invalid(field+".per_second", "must be positive (0 removes the rate limit)")
	}
	if r.PerSecond < MinRatePerSecond || r.PerSecond > MaxRatePerSecond {
		return Invalid(field+".per_second", "must be between one a day (%g) and %d", MinRatePerSecond, MaxRatePerSecond)
	}
	if r.Burst < 0 || r.Burst > MaxRateBurst {
		return Invalid(field+".burst", "must be between 1 and %d (absent: per_second rounded up)", MaxRateBurst)
	}
	return nil
}

// Normalized returns the limit as stored: the default burst filled in,
// the zero value for "none".
func (r RateLimit) Normalized() RateLimit {
	if r.PerSecond <= 0 {
		return RateLimit{}
	}
	if r.Burst == 0 {
		r.Burst = int(min(math.Ceil(r.PerSecond), MaxRateBurst))
	}
	return r
}

// Bucket is a rate-limited queue's token bucket: Tokens were available at
// At. A queue without a stored bucket has a full one.
type Bucket struct {
	Tokens float64
	At     time.Time
}

// tokenEpsilon absorbs float rounding: 0.1 s at 10/s must give one whole
// token, not 0.9999999.
const tokenEpsilon = 1e-9

// FullBucket is the bucket of a queue nobody claimed from yet.
func (r RateLimit) FullBucket(now time.Time) Bucket {
	return Bucket{Tokens: float64(r.Normalized().Burst), At: now}
}

// Refill returns b as of now: tokens added for the time since b.At,
// capped at the burst (a lowered burst caps what was saved). A clock that
// went back adds nothing and keeps b.At.
func (r RateLimit) Refill(b Bucket, now time.Time) Bucket {
	r = r.Normalized()
	burst := float64(r.Burst)
	if d := now.Sub(b.At); d > 0 {
		b.Tokens += d.Seconds() * r.PerSecond
		b.At = now
	}
	b.Tokens = min(b.Tokens, burst)
	return b
}

// Whole is how many tasks the bucket's tokens pay for now.
func (b Bucket) Whole() int {
	if b.Tokens <= 0 {
		return 0
	}
	return int(math.Floor(b.Tokens + tokenEpsilon))
}

// Take refills b to now and takes up to want tokens: it returns how many
// it took and the bucket after.
func (r RateLimit) Take(b Bucket, now time.Time, want int) (int, Bucket) {
	b = r.Refill(b, now)
	n := min(want, b.Whole())
	if n > 0 {
		b.Tokens -= float64(n)
		if b.Tokens < tokenEpsilon {
			b.Tokens = 0
		}
	}
	return n, b
}

// NextToken is how long after b.At the bucket holds a whole token (0 when
// it does).
func (r RateLimit) NextToken(b Bucket) time.Duration {
	if b.Whole() >= 1 {
		return 0
	}
	r = r.Normalized()
	need := (1 - b.Tokens) / r.PerSecond
	return time.Duration(math.Ceil(need * float64(time.Second)))
}

// HoldReason names the limit that held tasks back from a claim.
type HoldReason string

// The limits that hold tasks back.
const (
	HoldMaxRunning HoldReason = "max_running"
	HoldKeyLimit   HoldReason = "key_limit"
	HoldRateLimit  HoldReason = "rate_limit"
)

// HoldReasons lists every reason, in the order metrics show them.
var HoldReasons = []HoldReason{HoldMaxRunning, HoldKeyLimit, HoldRateLimit}

// Held counts tasks held back from claims, by reason.
type Held struct {
	MaxRunning, KeyLimit, RateLimit int64
}

// Add adds o to h.
func (h *Held) Add(o Held) {
	h.MaxRunning += o.MaxRunning
	h.KeyLimit += o.KeyLimit
	h.RateLimit += o.RateLimit
}

// Of returns the count for a reason.
func (h Held) Of(r HoldReason) int64 {
	switch r {
	case HoldMaxRunning:
		return h.MaxRunning
	case HoldKeyLimit:
		return h.KeyLimit
	case HoldRateLimit:
		return h.RateLimit
	}
	return 0
}

// HeldBack attributes what one claim of one queue did not hand out: it
// wanted want tasks, ready were ready (before the claim), maxRoom is what
// max_running left room for (-1: no such limit), tokens what the rate
// limit allowed (-1: none), and it got got. Of the min(want, ready) tasks
// it could have had, those beyond maxRoom are held by max_running, those
// beyond the tokens by rate_limit, and the rest it did not get by
// key_limit (keys at their limit).
func HeldBack(want, ready, maxRoom, tokens, got int) Held {
	could := min(want, ready)
	if could <= got {
		return Held{}
	}
	var h Held
	c := could
	if maxRoom >= 0 && maxRoom < c {
		h.MaxRunning = int64(c - maxRoom)
		c = maxRoom
	}
	if tokens >= 0 && tokens < c {
		h.RateLimit = int64(c - tokens)
		c = tokens
	}
	if c > got {
		h.KeyLimit = int64(c - got)
	}
	return h
}

// FlowStat is one flow-limited queue's figures for metrics: its running
// tasks now and the tasks its limits held back from this store's claims
// since it was opened.
type FlowStat struct {
	Queue string
	// Limited: the queue has a running or rate limit now; Running is then
	// its running tasks (0 otherwise).
	Limited bool
	Running int64
	Held    Held
}

// FlowReporter is implemented by stores that count what flow control holds
// back; the server exports it as metrics (docs/metrics.md).
type FlowReporter interface {
	// FlowStats lists the queues with limits, and those whose limits held
	// tasks back, sorted by name.
	FlowStats(ctx context.Context) ([]FlowStat, error)
}
