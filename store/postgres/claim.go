package postgres

import (
	"context"
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
		got, err := s.claimOnce(ctx, req)
		if err != nil || len(got) > 0 || req.Wait <= 0 {
			return got, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return got, nil
		}
		tokens := s.tokenWait(req.Queues, started) // rate limits wake their own waiters (ratelimit.go)
		timer := time.NewTimer(min(left, s.cfg.PollInterval))
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

func (s *Store) claimOnce(ctx context.Context, req norn.ClaimRequest) ([]*norn.Task, error) {
	var out []*norn.Task
	var timeout *int64
	if req.Timeout > 0 {
		ns := int64(req.Timeout)
		timeout = &ns
	}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = out[:0]
		for _, queue := range req.Queues {
			want := req.N - len(out)
			if want <= 0 {
				break
			}
			got, err := s.claimQueue(ctx, conn, queue, want, req.Worker, timeout)
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

// plainGateSQL is claimSetupSQL taking the queue's flow gate (flow.go) in
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

// claimQueue runs claimSQL for one queue: up to want tasks.
func (s *Store) claimQueue(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64) ([]*norn.Task, error) {
	if s.knownLimited(queue) {
		return s.claimLimited(ctx, conn, queue, want, worker, timeout)
	}
	// A claim with ready rows locks a few of them only (locking more would
	// leave concurrent claimers nothing to take): while it gets some but
	// not all it wants, it takes again, locking more rows each time, and
	// the queue's next claim starts from what sufficed (readyRowLimits).
	var out []*norn.Task
	rows := s.readyRows.get(queue)
	for len(out) < want {
		got, err := s.claimPlain(ctx, conn, queue, want-len(out), worker, timeout, rows)
		if err != nil {
			if len(out) > 0 {
				// What the earlier statements claimed is committed: hand
				// it out; the error comes back at the next claim.
				break
			}
			return nil, err
		}
		out = append(out, got...)
		if len(got) == 0 || s.knownLimited(queue) {
			break
		}
		if len(out) < want {
			rows = min(rows*4, maxReadyRows)
		}
	}
	s.readyRows.set(queue, rows, len(out) == want)
	return out, nil
}

// flowState is the node's side of the shared path: queues that cannot
// take it for a while, and (tests) smaller slots and claims.
type flowState struct {
	mu        sync.Mutex
	exclusive map[string]time.Time // queue → until when its claims go straight to the exclusive path
	rated     map[string]time.Time // queue → until when its claims go straight to claimRated
	keyed     map[string]time.Time // queue → until when its claims go straight to the keyed path (keyed.go)
	narrow    map[string]time.Time // queue → until when its keyed claims read at most keyedNarrow candidates (keyed.go)
	// queue → the key buckets its keyed claims hold exclusively (keyed.go)
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
	// Claims that took each path (tests).
	sharedClaims, exclusiveClaims, keyedClaims atomic.Int64
	// Keyed claims that admitted tasks holding every bucket shared (tests).
	keyedSharedClaims atomic.Int64
	counts            atomic.Int64 // shared verdicts that counted the running tasks (tests)
}

// staticRecheck is how long a queue whose settings rule the shared path
// out (small limits, fair_by, paused) goes straight to the
// exclusive path before the settings are read again.
const staticRecheck = time.Second

// knownLimited reports whether a claim of queue should go straight to
// claimLimited: the plain claim found it limited less than staticRecheck
// ago. Stale is harmless: claimLimited claims an unlimited queue too.
func (s *Store) knownLimited(queue string) bool {
	return s.flow.known(&s.flow.limited, queue)
}

// claimFoundLimited notes that the plain claim skipped queue for its
// limits, and claims it on the limited path.
func (s *Store) claimFoundLimited(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64) ([]*norn.Task, error) {
	s.flow.mark(&s.flow.limited, queue, true)
	return s.claimLimited(ctx, conn, queue, want, worker, timeout)
}

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

func (f *flowState) skipShared(queue string) bool { return f.known(&f.exclusive, queue) }

func (f *flowState) ruleOut(queue string) { f.mark(&f.exclusive, queue, true) }

// knownRated reports whether queue was found rate limited less than
// staticRecheck ago, so its claims go straight to claimRated. Stale is
// harmless both ways: the verdict tells an untaken claim of a rated queue
// (sharedRated), and claimRated of a queue without a rate limit finds no
// bucket to take from and falls back to the exclusive path.
func (f *flowState) knownRated(queue string) bool { return f.known(&f.rated, queue) }

func (f *flowState) markRated(queue string, rated bool) { f.mark(&f.rated, queue, rated) }

// claimLimited claims up to want tasks of a flow-limited queue: on the
// shared path when it may, else on the exclusive one.
func (s *Store) claimLimited(ctx context.Context, conn *pgx.Conn, queue string, want int, worker string, timeout *int64) ([]*norn.Task, error) {
	if !s.flow.skipShared(queue) {
		if s.flow.knownRated(queue) {
			out, done, err := s.claimRated(ctx, conn, queue, want, worker, timeout)
			if done || err != nil {
				return out, err
			}
		} else {
			verdict := sharedKeyed
			var out []*norn.Task
			if !s.flow.known(&s.flow.keyed, queue) {
				var err error
				if out, verdict, err = s.claimShared(ctx, conn, queue, want, worker, timeout); err != nil {
					return nil, err
				}
			}
			switch verdict {
			case sharedOK:
				s.flow.sharedClaims.Add(1)
				return out, nil
			case sharedStatic:
				s.flow.ruleOut(queue)
			case sharedRated:
				s.flow.markRated(queue, true)
				out, done, err := s.claimRated(ctx, conn, queue, want, worker, timeout)
				if done || err != nil {
					return out, err
				}
			case sharedKeyed:
				s.flow.mark(&s.flow.keyed, queue, true)
				out, done, err := s.claimKeyedOrExclusive(ctx, conn, queue, want, worker, timeout)
				if done || err != nil {
					return out, err
				}
			}
		}
	}
	s.flow.exclusiveClaims.Add(1)
	return s.claimExclusive(ctx, conn, queue, want, worker, timeout)
}
