package server

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// Abuse limits (docs/security.md): long polls and event streams hold a
// goroutine and a connection each for minutes, so their number is capped
// per caller and overall; excess is refused with 429 and Retry-After, and
// the caller's other requests are still served. Failed authentications
// are counted per client address; an address over the limit is refused
// (429) until its window ends, so tokens cannot be guessed at line rate.

// The reasons of norn_requests_refused_total (docs/metrics.md): which
// limit refused a request.
const (
	refusedBodyTooLarge     = "body_too_large"     // the body is over MaxBodyBytes (413)
	refusedBodyTimeout      = "body_timeout"       // the body did not arrive within BodyReadTimeout (408)
	refusedStreams          = "streams"            // the server's MaxStreams long polls and streams are open (429)
	refusedStreamsPerCaller = "streams_per_caller" // the caller's MaxStreamsPerCaller are open (429)
	refusedAuthFailures     = "auth_failures"      // the address failed authentication MaxAuthFailures times (429)
	// the server's MaxEventStreams, or the caller's
	// MaxEventStreamsPerCaller, event streams are open (429)
	refusedEventStreams          = "event_streams"
	refusedEventStreamsPerCaller = "event_streams_per_caller"
)

var refusalReasons = []string{refusedBodyTooLarge, refusedBodyTimeout, refusedStreams, refusedStreamsPerCaller, refusedAuthFailures,
	refusedEventStreams, refusedEventStreamsPerCaller}

// refusal marks the error of a request one of the limits refused, so that
// writeError counts it by reason; the error it wraps is what the client sees.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// refusedBy names the limit that refused a request with err, or "".
func refusedBy(err error) string {
	var rf *refusal
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &rf):
		return rf.reason
	case errors.As(err, &mbe):
		return refusedBodyTooLarge
	case wire.Status(err) == http.StatusRequestTimeout:
		return refusedBodyTimeout
	}
	return ""
}

// streamLimiter counts the long polls and streams running per caller.
type streamLimiter struct {
	mu               sync.Mutex
	perCaller        map[string]int
	total            int
	maxTotal, maxPer int
	// what the limiter counts and the reasons of its refusals.
	what                 string
	reasonAll, reasonOne string
}

func newStreamLimiter(maxTotal, maxPer int) *streamLimiter {
	return &streamLimiter{perCaller: map[string]int{}, maxTotal: maxTotal, maxPer: maxPer,
		what: "long polls and streams", reasonAll: refusedStreams, reasonOne: refusedStreamsPerCaller}
}

func newEventStreamLimiter(maxTotal, maxPer int) *streamLimiter {
	return &streamLimiter{perCaller: map[string]int{}, maxTotal: maxTotal, maxPer: maxPer,
		what: "event streams", reasonAll: refusedEventStreams, reasonOne: refusedEventStreamsPerCaller}
}

// acquire takes a slot for caller, or refuses with 429.
func (l *streamLimiter) acquire(caller string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.total >= l.maxTotal {
		return nil, &refusal{reason: l.reasonAll, err: &wire.StatusError{Status: http.StatusTooManyRequests, RetryAfter: time.Second,
			Err: norn.Errorf(norn.CodeUnavailable, "the server has %d %s open, its limit; retry later", l.total, l.what)}}
	}
	if l.perCaller[caller] >= l.maxPer {
		return nil, &refusal{reason: l.reasonOne, err: &wire.StatusError{Status: http.StatusTooManyRequests, RetryAfter: time.Second,
			Err: norn.Errorf(norn.CodeUnavailable, "this caller has %d %s open, its limit; retry later", l.perCaller[caller], l.what)}}
	}
	l.total++
	l.perCaller[caller]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.total--
			if l.perCaller[caller]--; l.perCaller[caller] <= 0 {
				delete(l.perCaller, caller)
			}
		})
	}, nil
}

// callerKey names the caller for the per-caller limits: its token, or its
// address when authentication is off.
func callerKey(p *principal, r *http.Request) string {
	if p.key != "" {
		return p.key
	}
	return "addr:" + clientAddr(r)
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// failureLimiter counts failed authentications per client address over a
// fixed window.
type failureLimiter struct {
	mu     sync.Mutex
	max    int
	window time.Duration
	now    func() time.Time
	byAddr map[string]*failures
}

type failures struct {
	n     int
	start time.Time
}

// maxTrackedAddrs bounds the limiter's memory: past it, expired entries
// are dropped, and if none are, the table starts over.
const maxTrackedAddrs = 100_000

func newFailureLimiter(max int, window time.Duration) *failureLimiter {
	return &failureLimiter{max: max, window: window, now: time.Now, byAddr: map[string]*failures{}}
}

// blocked reports how long addr must wait, or 0.
func (l *failureLimiter) blocked(addr string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.byAddr[addr]
	if f == nil {
		return 0
	}
	left := f.start.Add(l.window).Sub(l.now())
	if left <= 0 {
		delete(l.byAddr, addr)
		return 0
	}
	if f.n < l.max {
		return 0
	}
	return left
}

// fail records a failed authentication from addr.
func (l *failureLimiter) fail(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	f := l.byAddr[addr]
	if f == nil || now.Sub(f.start) >= l.window {
		if len(l.byAddr) >= maxTrackedAddrs {
			for a, g := range l.byAddr {
				if now.Sub(g.start) >= l.window {
					delete(l.byAddr, a)
				}
			}
			if len(l.byAddr) >= maxTrackedAddrs {
				clear(l.byAddr)
			}
		}
		f = &failures{start: now}
		l.byAddr[addr] = f
	}
	f.n++
}
