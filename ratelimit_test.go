package norn

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestRateLimitValidate(t *testing.T) {
	for _, c := range []struct {
		r     RateLimit
		field string // "" = valid
	}{
		{RateLimit{PerSecond: 100, Burst: 10}, ""},
		{RateLimit{PerSecond: 0.5}, ""},
		{RateLimit{}, ""}, // removes
		{RateLimit{Burst: 3}, "rate_limit.burst"},
		{RateLimit{PerSecond: -1}, "rate_limit.per_second"},
		{RateLimit{PerSecond: math.NaN()}, "rate_limit.per_second"},
		{RateLimit{PerSecond: math.Inf(1)}, "rate_limit.per_second"},
		{RateLimit{PerSecond: 1e7}, "rate_limit.per_second"},
		{RateLimit{PerSecond: 1e-6}, "rate_limit.per_second"},
		{RateLimit{PerSecond: 1, Burst: -1}, "rate_limit.burst"},
		{RateLimit{PerSecond: 1, Burst: MaxRateBurst + 1}, "rate_limit.burst"},
	} {
		u := QueueUpdate{RateLimit: &c.r}
		err := u.Validate()
		if c.field == "" {
			if err != nil {
				t.Errorf("%+v: %v", c.r, err)
			}
			continue
		}
		var ne *Error
		if !errors.As(err, &ne) || ne.Field != c.field || ne.Code != CodeInvalidArgument {
			t.Errorf("%+v: got %v, want an invalid-argument error on %s", c.r, err, c.field)
		}
	}
}

func TestRateLimitNormalized(t *testing.T) {
	for _, c := range []struct{ in, want RateLimit }{
		{RateLimit{PerSecond: 100}, RateLimit{PerSecond: 100, Burst: 100}},
		{RateLimit{PerSecond: 0.5}, RateLimit{PerSecond: 0.5, Burst: 1}},
		{RateLimit{PerSecond: 2.5, Burst: 7}, RateLimit{PerSecond: 2.5, Burst: 7}},
		{RateLimit{}, RateLimit{}},
	} {
		if got := c.in.Normalized(); got != c.want {
			t.Errorf("%+v.Normalized() = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func TestBucketTake(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r := RateLimit{PerSecond: 10, Burst: 5}
	b := r.FullBucket(t0)
	steps := []struct {
		after time.Duration // since t0
		want  int
		got   int
		next  time.Duration // NextToken after the take
	}{
		{0, 10, 5, 100 * time.Millisecond},                      // the burst
		{0, 1, 0, 100 * time.Millisecond},                       // empty
		{100 * time.Millisecond, 3, 1, 100 * time.Millisecond},  // one token per 0.1 s
		{150 * time.Millisecond, 1, 0, 50 * time.Millisecond},   // half a token
		{time.Hour, 100, 5, 100 * time.Millisecond},             // refill caps at the burst
		{time.Hour - time.Second, 1, 0, 100 * time.Millisecond}, // the clock went back: nothing added
		{time.Hour + 250*time.Millisecond, 1, 1, 0},             // 2.5 tokens, one taken
	}
	for i, s := range steps {
		var n int
		n, b = r.Take(b, t0.Add(s.after), s.want)
		if n != s.got {
			t.Fatalf("step %d: took %d, want %d (bucket %+v)", i, n, s.got, b)
		}
		if next := r.NextToken(b); next != s.next {
			t.Fatalf("step %d: next token in %v, want %v (bucket %+v)", i, next, s.next, b)
		}
	}
	// A lowered burst caps what was saved.
	if got := (RateLimit{PerSecond: 10, Burst: 2}).Refill(Bucket{Tokens: 5, At: t0}, t0); got.Tokens != 2 {
		t.Fatalf("refill under a lowered burst: %v tokens", got.Tokens)
	}
}

func TestHeldBack(t *testing.T) {
	for _, c := range []struct {
		want, ready, maxRoom, tokens, got int
		held                              Held
	}{
		{10, 3, -1, -1, 3, Held{}},              // took everything ready
		{10, 20, 2, -1, 2, Held{MaxRunning: 8}}, // max_running
		{10, 20, -1, 4, 4, Held{RateLimit: 6}},  // tokens
		{10, 20, 5, 3, 1, Held{MaxRunning: 5, RateLimit: 2, KeyLimit: 2}},
		{10, 6, -1, -1, 2, Held{KeyLimit: 4}}, // keys at their limit
		{5, 0, 0, 0, 0, Held{}},               // nothing ready: nothing held
	} {
		if h := HeldBack(c.want, c.ready, c.maxRoom, c.tokens, c.got); h != c.held {
			t.Errorf("HeldBack(%d, %d, %d, %d, %d) = %+v, want %+v", c.want, c.ready, c.maxRoom, c.tokens, c.got, h, c.held)
		}
	}
}

func TestKeyBackoffGivesTheFirstTokenWhenTheSnoozeEnds(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		rl    RateLimit
		until time.Duration // after now
		first time.Duration // the first whole token, after now
	}{
		{"ten seconds at 2/s", RateLimit{PerSecond: 2}, 10 * time.Second, 10 * time.Second},
		{"shorter than a token period", RateLimit{PerSecond: 0.5}, time.Second, 2 * time.Second},
		{"already over", RateLimit{PerSecond: 4}, -time.Minute, 250 * time.Millisecond},
	} {
		b := KeyBackoff(c.rl, now.Add(c.until), now)
		before := c.rl.Refill(b, now.Add(c.first-time.Millisecond))
		at := c.rl.Refill(b, now.Add(c.first))
		if before.Whole() != 0 || at.Whole() != 1 {
			t.Errorf("%s: %v before the first token, %v at it; want 0 then 1", c.name, before.Tokens, at.Tokens)
		}
	}
}

func TestKeyRateFor(t *testing.T) {
	t.Parallel()
	f := QueueFlow{KeyRateLimit: RateLimit{PerSecond: 2}}
	own := &KeySettings{RateLimit: RateLimit{PerSecond: 10, Burst: 3}}
	for _, c := range []struct {
		name string
		key  string
		ks   *KeySettings
		want RateLimit
	}{
		{"no key", "", own, RateLimit{}},
		{"queue default, burst filled in", "a", nil, RateLimit{PerSecond: 2, Burst: 2}},
		{"own overrides", "a", own, RateLimit{PerSecond: 10, Burst: 3}},
		{"own without rate", "a", &KeySettings{Limit: 1}, RateLimit{PerSecond: 2, Burst: 2}},
	} {
		if got := f.KeyRateFor(c.key, c.ks); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if (QueueFlow{}).KeyRated(false) || !(QueueFlow{}).KeyRated(true) || !f.KeyRated(false) {
		t.Error("KeyRated")
	}
}
