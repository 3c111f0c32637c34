package postgres

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nornq/norn"
)

// The claim router. A claim of one queue takes one of five paths, and
// claimQueue alone decides which, from what this node last learnt about the
// queue (flowState.route) and what each path finds:
//
//   - plain (claim_plain.go): no flow limits; the lease claim of ready rows.
//   - shared (claim_shared.go): limits far from binding; the plain claim
//     behind a verdict that bounds the running tasks without counting them.
//   - rated (claim_rated.go): a rate limit, otherwise shared; the tokens
//     are taken inside the claim.
//   - keyed (claim_keyed.go): key limits under the shared margin, claims
//     side by side holding key buckets shared or exclusively.
//   - exclusive (claim_exclusive.go): limits near or small, fair_by,
//     paused; one claim at a time counts and admits exactly.
//
// A path that finds the queue is not its own says which path to try next;
// the node remembers it for staticRecheck, so the next claim goes there
// first. Stale knowledge costs a detour, never correctness: every path
// checks the queue's settings in its own transaction.

// Claim leases ready tasks, long-polling when req.Wait is set: it sleeps
// until a notification says a task became ready (on any node) or
// PollInterval passes, whichever is first.
func (s *Store) Claim(ctx context.Context, req norn.ClaimRequest) ([]*norn.Task, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	var deadline time.Time
	if req.Wait > 0 {
		deadline = time.Now().Add(req.Wait.D())
	}
	for {
		wake := s.wake.wait() // before claiming, so a notification in between is not missed
		started := time.Now()
		got, retry, err := s.claimOrGather(ctx, req)
		if err != nil || len(got) > 0 {
			return got, err
		}
		if req.Wait <= 0 {
			return got, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return got, nil
		}
		if !retry.IsZero() {
			left = min(left, max(time.Until(retry), time.Millisecond))
		}
		tokens := s.tokenWait(req.Queues, started) // rate limits wake their own waiters (ratelimit.go)
		timer := time.NewTimer(min(left, s.cfg.PollInterval))
		if s.cfg.claimWaits != nil {
			s.cfg.claimWaits()
		}
		select {
		case <-wake:
		case <-tokens.c:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			s.endTokenWait(tokens)
			return nil, ctx.Err()
		case <-s.ctx.Done():
			timer.Stop()
			s.endTokenWait(tokens)
			return nil, norn.ErrClosed
		}
		timer.Stop()
		s.endTokenWait(tokens)
	}
}

// claimOrGather claims once: a group claim (claim_group.go), or a claim
// that first gathers (a batch claim's min, gather.go). Without tasks,
// retry is when the answer may change by itself.
func (s *Store) claimOrGather(ctx context.Context, req norn.ClaimRequest) (got []*norn.Task, retry time.Time, err error) {
	if req.GroupBy != "" {
		got, retry, err = s.claimGrouped(ctx, req)
		if got == nil {
			got = []*norn.Task{}
		}
		return got, retry, err
	}
	take, retry, err := s.gathered(ctx, &req)
	if err != nil || !take {
		return []*norn.Task{}, retry, err
	}
	got, err = s.claimOnce(ctx, req)
	return got, time.Time{}, err
}

func (s *Store) claimOnce(ctx context.Context, req norn.ClaimRequest) ([]*norn.Task, error) {
	var out []*norn.Task
	var timeout *int64
	if req.Timeout > 0 {
		ns := int64(req.Timeout)
		timeout = &ns
	}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = out[:0]
		for _, queue := range req.ClaimOrder(rand.Float64) {
			want := req.N - len(out)
			if want <= 0 {
				break
			}
			got, err := s.claimQueue(ctx, conn, claimCall{queue: queue, want: want, worker: req.Worker, timeout: timeout})
			if err != nil {
				return err
			}
			out = append(out, got...)
		}
		return nil
	})
	return out, err
}

// claimSetupSQL is noSortSQL plus a generic plan for the claim: the
// statement is otherwise planned anew at every call (a custom plan for the
// LIMIT and queue given), which cost about a tenth of the database's CPU
// per claimed task. A generic plan does not know the LIMIT and could
// prefer a hash join over a sequential scan of the table for the
// assignment, and such a plan would stay cached on the connection; with
// sequential scans, hash and merge joins disabled as well, the plan is the
// one the custom plans chose (the claim index read in order, the rows
// joined by primary key), whatever the statistics say.
const claimSetupSQL = "SELECT " + claimSetupGUCs

// plainGateSQL is claimSetupSQL taking the queue's flow gate (claim_shared.go) in
// shared mode first, held until the plain claim commits: a change of the
// queue's settings (UpdateQueue takes the gate exclusively) waits for the
// plain claims in flight, so none that read the queue unlimited commits
// its tasks after the first limited claim counted without them. Claims
// hold it in shared mode: they never wait for one another.
const plainGateSQL = "SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0)), " + claimSetupGUCs

// claimSetupGUCs are claimSetupSQL's settings (the shared path's verdict
// sets them for the claim statement after it).
const claimSetupGUCs = "set_config('enable_sort', 'off', true), set_config('jit', 'off', true), " + genericPlanGUCs

// genericPlanGUCs, in the same implicit transaction as a hot statement,
// make it run a cached generic plan restricted to index scans and nested
// loops (see claimSetupSQL).
const genericPlanGUCs = "set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true), " +
	"set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)"

// hashJoinGUCs make the statements that join a batch (an unnest of
// arrays) with tasks — the completion and the dependents' release — run a
// cached generic plan that joins the two by hashing: tasks is read only
// through tasks_pkey with the batch's t.id = ANY condition (sequential
// scans stay off), the batch is hashed, and a batch of n costs O(n). With
// nested loops the generic plan (which guesses 10 rows for either side)
// rescanned one side for every row of the other: a merged completion of
// 3,000 tasks compared 4.5 million pairs and took 2 s.
const hashJoinGUCs = "set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true), " +
	"set_config('enable_hashjoin', 'on', true), set_config('enable_mergejoin', 'off', true), set_config('enable_nestloop', 'off', true)"

// flowState is what this node learnt about the flow-limited queues: the
// routing marks (each lasts staticRecheck), the keyed path's tight buckets,
// the limited pick's place, and (tests) smaller slots and claims.
type flowState struct {
	mu        sync.Mutex
	exclusive map[string]time.Time // queue → until when its claims go straight to the exclusive path
	rated     map[string]time.Time // queue → until when its claims go straight to the rated path
	keyed     map[string]time.Time // queue → until when its claims go straight to the keyed path (claim_keyed.go)
	narrow    map[string]time.Time // queue → until when its keyed claims read at most keyedNarrow candidates (claim_keyed.go)
	// queue → the key buckets its keyed claims hold exclusively (claim_keyed.go)
	tightBuckets map[string]tightMark
	limited      map[string]time.Time // queue → until when its claims skip the plain claim
	slots        int                  // 0: flowSlots
	cap          int                  // largest shared claim; 0: norn.MaxClaim
	recheck      time.Duration        // how long a queue stays ruled out; 0: staticRecheck (tests)
	// queue → where the last limited pick's read of tasks without a key
	// past the head stopped (pickLimited)
	keylessFrom  map[string]readyCand
	keylessChunk int // tasks that read reads; 0: pickChunk (tests)
	sqlOnce      sync.Once
	// The exclusive path's claim of the first ready tasks; the shared
	// path's claim, and from a claim hint; the keyed path's, and from a
	// hint (buildFlowSQL).
	claimFirstSQL, leaseSQL, ratedLeaseSQL, keyedSQL, keyedFromSQL string
	// Claims served by each path, for metrics and the tests.
	claims [numPaths]atomic.Int64
	// Keyed claims that admitted tasks holding every bucket shared (tests).
	keyedSharedClaims atomic.Int64
	counts            atomic.Int64 // shared verdicts that counted the running tasks (tests)
}

// staticRecheck is how long a queue whose settings rule the shared path
// out (small limits, fair_by, paused) goes straight to the
// exclusive path before the settings are read again.
const staticRecheck = time.Second

func (f *flowState) margins() (slots, cap int) {
	slots, cap = flowSlots, norn.MaxClaim
	if f.slots > 0 {
		slots = f.slots
	}
	if f.cap > 0 {
		cap = f.cap
	}
	return slots, cap
}

// known reports whether queue was marked in m (one of flowState's maps)
// less than staticRecheck ago.
func (f *flowState) known(m *map[string]time.Time, queue string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	until, ok := (*m)[queue]
	if ok && time.Now().After(until) {
		delete(*m, queue)
		return false
	}
	return ok
}

// mark notes queue in m for staticRecheck (the test's recheck, if set),
// or forgets it.
func (f *flowState) mark(m *map[string]time.Time, queue string, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !on {
		delete(*m, queue)
		return
	}
	if *m == nil {
		*m = map[string]time.Time{}
	}
	(*m)[queue] = time.Now().Add(f.recheckFor())
}

// recheckFor is how long a mark lasts: staticRecheck, or the tests' recheck.
func (f *flowState) recheckFor() time.Duration {
	if f.recheck > 0 {
		return f.recheck
	}
	return staticRecheck
}

// claimPath is one of the ways a claim of a queue can go.
type claimPath uint8

const (
	pathPlain claimPath = iota
	pathShared
	pathRated
	pathKeyed
	pathExclusive
	numPaths
	// served is no path: the last one claimed (whatever it got).
	served = numPaths
)

var pathNames = [numPaths]string{"plain", "shared", "rated", "keyed", "exclusive"}

func (p claimPath) String() string { return pathNames[p] }

// claimCall is one claim of one queue, what every path needs.
type claimCall struct {
	queue   string
	want    int
	worker  string
	timeout *int64 // the lease length in ns, overriding the tasks' (nil: theirs)
}

// route decides which path a claim of queue tries first, and why, from
// what this node learnt about it in the last staticRecheck.
func (f *flowState) route(queue string) (claimPath, string) {
	switch {
	case !f.known(&f.limited, queue):
		return pathPlain, "no flow limits seen"
	case f.known(&f.exclusive, queue):
		return pathExclusive, "limits near or small, fair_by, or paused"
	case f.known(&f.rated, queue):
		return pathRated, "a rate limit"
	case f.known(&f.keyed, queue):
		return pathKeyed, "key limits under the shared path's margin"
	}
	return pathShared, "limits far from binding"
}

// claimQueue claims up to c.want tasks of c.queue on the path route
// chooses. A path that finds the queue is not its own learns why (it marks
// flowState) and names the next path; the hand-offs only go down the list
// of paths (plain, shared, rated, keyed, exclusive), and the exclusive
// path serves every queue, so a claim takes at most four of them.
func (s *Store) claimQueue(ctx context.Context, conn *pgx.Conn, c claimCall) ([]*norn.Task, error) {
	path, _ := s.flow.route(c.queue)
	for {
		out, next, err := s.claimOn(ctx, conn, path, c)
		if err != nil || next == served {
			return out, err
		}
		path = next
	}
}

// claimOn runs one path: the tasks it claimed (next served), or the path
// to try next. It counts the claims each path ran under its own verdict
// (a keyed claim that admits nothing and hands over to the exclusive path
// counts on both).
func (s *Store) claimOn(ctx context.Context, conn *pgx.Conn, path claimPath, c claimCall) ([]*norn.Task, claimPath, error) {
	switch path {
	case pathPlain:
		out, next, err := s.claimPlainPath(ctx, conn, c)
		if err == nil && next == served {
			s.flow.claims[pathPlain].Add(1)
		}
		return out, next, err
	case pathShared:
		out, verdict, err := s.claimShared(ctx, conn, c)
		if err != nil {
			return nil, served, err
		}
		if verdict == sharedOK {
			s.flow.claims[pathShared].Add(1)
			return out, served, nil
		}
		return nil, s.afterVerdict(c.queue, verdict, pathShared), nil
	case pathRated:
		out, done, err := s.claimRated(ctx, conn, c)
		if done && err == nil {
			s.flow.claims[pathRated].Add(1)
		}
		if done || err != nil {
			return out, served, err
		}
	case pathKeyed:
		out, done, err := s.claimKeyedOrExclusive(ctx, conn, c)
		if done || err != nil {
			return out, served, err
		}
	default:
		s.flow.claims[pathExclusive].Add(1)
		out, err := s.claimExclusive(ctx, conn, c)
		return out, served, err
	}
	return nil, pathExclusive, nil
}

// afterVerdict learns from a shared-path verdict that did not let the
// claim through on path from, and names the next path.
func (s *Store) afterVerdict(queue, verdict string, from claimPath) claimPath {
	switch verdict {
	case sharedStatic:
		s.flow.mark(&s.flow.exclusive, queue, true)
	case sharedRated:
		s.flow.mark(&s.flow.rated, queue, true)
		if from < pathRated {
			return pathRated
		}
	case sharedKeyed:
		s.flow.mark(&s.flow.keyed, queue, true)
		if from < pathKeyed {
			return pathKeyed
		}
	}
	return pathExclusive
}

// ClaimPaths reports how many claims of this node each path served since
// the store was opened (norn.ClaimPathReporter).
func (s *Store) ClaimPaths() []norn.PathCount {
	out := make([]norn.PathCount, numPaths)
	for p := range numPaths {
		out[p] = norn.PathCount{Path: p.String(), Claims: s.flow.claims[p].Load()}
	}
	return out
}

// claimPathOf says which path q's settings send its claims to. A claim
// near a count limit also goes to the exclusive path, for staticRecheck.
func (s *Store) claimPathOf(q *norn.QueueInfo) norn.ClaimPath {
	var (
		path claimPath
		why  string
	)
	slots, cap := s.flow.margins()
	margin := slots * cap
	keyLimit := q.KeyLimit
	for _, k := range q.Keys {
		if k.Limit > 0 && (keyLimit == 0 || k.Limit < keyLimit) {
			keyLimit = k.Limit
		}
	}
	switch {
	case !q.Limited() && keyLimit == 0 && !q.RateLimited() && q.FairBy == "" && !keyRated(q):
		path, why = pathPlain, "no flow limits"
	case q.Paused || q.FairBy != "":
		path, why = pathExclusive, "paused or fair_by"
	case keyRated(q):
		path, why = pathExclusive, "key rate limits"
	case keyLimit > 0 && keyLimit < margin && (q.MaxRunning == 0 || q.MaxRunning >= margin) && !q.RateLimited():
		path, why = pathKeyed, "key limits under the shared path's margin"
	case (q.MaxRunning > 0 && q.MaxRunning < margin) || (keyLimit > 0 && keyLimit < margin):
		path, why = pathExclusive, "count limits under the shared path's margin"
	case q.RateLimited():
		path, why = pathRated, "a rate limit"
	default:
		path, why = pathShared, "limits far from binding"
	}
	return norn.ClaimPath{Path: path.String(), Reason: why}
}

// keyRated reports whether any key of q has a rate limit.
func keyRated(q *norn.QueueInfo) bool {
	return q.QueueFlow.KeyRated(slices.ContainsFunc(q.Keys, func(k norn.KeyInfo) bool { return k.RateLimit.PerSecond > 0 }))
}
