package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nornq/norn"
)

// RunTwin runs one workload on two stores side by side, their clocks moved
// together, and fails at the first step after which a call's answer, an
// error, the events a subscriber saw, a queue's counts or any task (with
// its log and signals) differs between them. The conformance
// cases check what the contract says; this checks that where both stores
// apply a rule they apply it alike, down to run_at, versions and history.
func RunTwin(t *testing.T, a, b Factory) {
	var twins [2]*twin
	for i, f := range []Factory{a, b} {
		_, tb := newSetup(f)(t)
		twins[i] = &twin{b: tb, held: map[string]*norn.Task{}}
		twins[i].subscribe()
	}
	for n, st := range twinSteps() {
		var got, events [2]string
		for i, tw := range twins {
			got[i] = canonAnswer(st.do(tw))
		}
		t.Logf("%s: %.300s", st.name, got[0])
		if got[0] != got[1] {
			t.Fatalf("step %q answers differ:\nfirst  %s\nsecond %s", st.name, got[0], got[1])
		}
		for i, tw := range twins {
			events[i] = tw.stepEvents(n)
		}
		if events[0] != events[1] {
			t.Fatalf("step %q events differ:\nfirst  %s\nsecond %s", st.name, events[0], events[1])
		}
		s0, s1 := twins[0].state(), twins[1].state()
		for _, k := range sortedKeys(s0, s1) {
			if s0[k] != s1[k] {
				t.Fatalf("after step %q, %s differs:\nfirst  %s\nsecond %s", st.name, k, s0[k], s1[k])
			}
		}
	}
}

// subscribe follows every event of the store for the rest of the test.
func (tw *twin) subscribe() {
	st, err := tw.b.s.Subscribe(tw.b.ctx, norn.EventFilter{})
	tw.b.must(err, "Subscribe")
	tw.events = make(chan norn.Event, 4096)
	go func() {
		defer close(tw.events)
		for st.Next() {
			tw.events <- st.Item()
		}
	}()
	tw.b.t.Cleanup(func() { st.Close() })
}

// stepEvents submits marker task n and returns, canonical and sorted (the
// order within one write is the store's), the events that came before the
// marker's own: every event of the step, since a store delivers events in
// commit order.
func (tw *twin) stepEvents(n int) string {
	marker := fmt.Sprintf("mark-%03d", n)
	_, err := tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: marker, Queue: "zz-mark"})
	tw.b.must(err, "Submit %s", marker)
	var got []string
	timeout := time.After(30 * time.Second)
	for {
		select {
		case e, ok := <-tw.events:
			if !ok {
				tw.b.t.Fatalf("the event stream ended before marker %s", marker)
			}
			if e.TaskID == marker {
				sort.Strings(got)
				return strings.Join(got, "\n")
			}
			if generated(e.TaskID) {
				e.TaskID = "generated"
			}
			e.Time = e.Time.UTC().Truncate(time.Microsecond)
			got = append(got, canonAnswer(e))
		case <-timeout:
			tw.b.t.Fatalf("no event for marker %s in 30 s; before it: %v", marker, got)
		}
	}
}

// twin is one store of the pair, with the tasks its claims hold.
type twin struct {
	b      *testBundle
	held   map[string]*norn.Task
	events chan norn.Event
}

type twinStep struct {
	name string
	do   func(*twin) any
}

// state is every task, every queue's counts and every task's log and
// signals, as canonical JSON keyed by what they are.
func (tw *twin) state() map[string]string {
	out := map[string]string{}
	it, err := tw.b.s.Stream(tw.b.ctx, norn.Query{})
	for _, tk := range collect(tw.b.t, it, err) {
		id := tk.ID
		key := "task " + id
		if generated(id) {
			// Named by what it is: the stores draw their own ids.
			key = "generated task " + canonAnswer(tk)
			for n := 2; out[key] != ""; n++ {
				key = fmt.Sprintf("generated task #%d %s", n, canonAnswer(tk))
			}
			out[key] = canonAnswer(tk)
			continue
		}
		out[key] = canonAnswer(tk)
		log, err := tw.b.s.ReadLog(tw.b.ctx, id, 0, 0)
		out["log "+id] = canonAnswer(answer(log, err))
		sigs, err := tw.b.s.Signals(tw.b.ctx, id, 0)
		out["signals "+id] = canonAnswer(answer(sigs, err))
	}
	qs, err := tw.b.s.Queues(tw.b.ctx)
	out["queues"] = canonAnswer(answer(qs, err))
	return out
}

// claim claims up to n tasks of queue for worker and holds them.
func (tw *twin) claim(worker, queue string, n int) any {
	got, err := tw.b.s.Claim(tw.b.ctx, norn.ClaimRequest{Worker: worker, Queues: []string{queue}, N: n})
	for _, tk := range got {
		tw.held[tk.ID] = tk
	}
	return answer(got, err)
}

// ref is the lease of a held task (a zero one when none is held, which
// both stores then refuse alike).
func (tw *twin) ref(id string) norn.LeaseRef {
	if tk := tw.held[id]; tk != nil {
		return ref(tk)
	}
	return norn.LeaseRef{TaskID: id}
}

func (tw *twin) now() time.Time { return tw.b.now() }

func (tw *twin) advance(d time.Duration) any {
	tw.b.clock.Advance(d)
	rep, err := tw.b.s.Sweep(tw.b.ctx)
	return answer(rep, err)
}

// answer pairs a call's result with its error, so both are compared.
func answer(v any, err error) any {
	return struct {
		V   any
		Err error
	}{v, err}
}

func errOnly(err error) any { return answer(nil, err) }

// twinSteps is the workload: every kind of task and every way through a
// task's life, in an order whose every step depends on the ones before.
func twinSteps() []twinStep {
	return slices.Concat(twinSubmits(), twinLives(), twinFlows(), twinLimits(), twinMore(), twinEdges(), twinSettings(), twinBulk())
}

func twinSubmits() []twinStep {
	return []twinStep{
		{"submit", func(tw *twin) any {
			now := tw.now()
			got, err := tw.b.s.Submit(tw.b.ctx,
				norn.NewTask{ID: "a", Queue: "q", Spec: json.RawMessage(`{"n": 1}`), Labels: map[string]string{"k": "v"}},
				norn.NewTask{ID: "hi", Queue: "q", Priority: 5},
				norn.NewTask{ID: "late", Queue: "q", RunAt: now.Add(time.Minute)},
				norn.NewTask{ID: "dep", Queue: "d", DependsOn: []string{"a"}},
				norn.NewTask{ID: "uniq", Queue: "u", UniqueKey: "k1"},
				norn.NewTask{ID: "tmo", Queue: "t", Timeout: dur(10 * time.Second), MaxAttempts: ptr(2)},
				norn.NewTask{ID: "yield", Queue: "y"},
				norn.NewTask{ID: "snz", Queue: "s"},
				norn.NewTask{ID: "cx", Queue: "c"},
				norn.NewTask{ID: "upd", Queue: "c"},
				norn.NewTask{ID: "sig", Queue: "g"},
				norn.NewTask{ID: "ab", Queue: "x", MaxAttempts: ptr(1)},
			)
			return answer(got, err)
		}},
		{"submit a duplicate unique key", func(tw *twin) any {
			got, err := tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "uniq2", Queue: "u", UniqueKey: "k1"})
			return answer(got, err)
		}},
		{"submit an existing id", func(tw *twin) any {
			got, err := tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "a", Queue: "q"})
			return answer(got, err)
		}},
	}
}

func twinLives() []twinStep {
	return []twinStep{
		{"claim two by priority", func(tw *twin) any { return tw.claim("w1", "q", 2) }},
		{"heartbeat with progress", func(tw *twin) any {
			dl, err := tw.b.s.Heartbeat(tw.b.ctx, tw.ref("a"), norn.Heartbeat{Progress: ptr(0.5)})
			return answer(dl, err)
		}},
		{"append to the log", func(tw *twin) any {
			e, err := tw.b.s.AppendLog(tw.b.ctx, tw.ref("a"), norn.LogAppend{Data: json.RawMessage(`{"line": 1}`)})
			return answer(e, err)
		}},
		{"complete with a result", func(tw *twin) any {
			return errOnly(tw.b.s.Complete(tw.b.ctx, tw.ref("a"), json.RawMessage(`{"ok": true}`)))
		}},
		{"complete again", func(tw *twin) any {
			return errOnly(tw.b.s.Complete(tw.b.ctx, tw.ref("a"), json.RawMessage(`{"ok": true}`)))
		}},
		{"claim the released dependent", func(tw *twin) any { return tw.claim("w2", "d", 5) }},
		{"fail it into a retry", func(tw *twin) any {
			return errOnly(tw.b.s.Fail(tw.b.ctx, tw.ref("dep"), norn.ErrorInfo{Code: "boom", Description: "it broke"}))
		}},
		{"claim the short lease", func(tw *twin) any { return tw.claim("w3", "t", 1) }},
		{"its lease expires", func(tw *twin) any { return tw.advance(11 * time.Second) }},
		{"a late heartbeat", func(tw *twin) any {
			dl, err := tw.b.s.Heartbeat(tw.b.ctx, tw.ref("tmo"), norn.Heartbeat{})
			return answer(dl, err)
		}},
		{"claim it again", func(tw *twin) any { return tw.claim("w3", "t", 1) }},
		{"the last attempt expires", func(tw *twin) any { return tw.advance(11 * time.Second) }},
		{"claim and yield", func(tw *twin) any {
			tw.claim("w4", "y", 1)
			return errOnly(tw.b.s.Yield(tw.b.ctx, tw.ref("yield")))
		}},
		{"claim and snooze", func(tw *twin) any {
			tw.claim("w4", "s", 1)
			got, err := tw.b.s.Snooze(tw.b.ctx, tw.ref("snz"), norn.Snooze{Delay: dur(30 * time.Second)})
			return answer(got, err)
		}},
		{"claim and wait for a signal", func(tw *twin) any {
			tw.claim("w5", "g", 1)
			got, err := tw.b.s.Snooze(tw.b.ctx, tw.ref("sig"), norn.Snooze{UntilSignal: "go", Timeout: dur(time.Hour)})
			return answer(got, err)
		}},
		{"signal it", func(tw *twin) any {
			got, err := tw.b.s.Signal(tw.b.ctx, "sig", norn.NewSignal{Name: "go", Data: json.RawMessage(`{"x": 1}`)})
			return answer(got, err)
		}},
		{"claim and abort", func(tw *twin) any {
			tw.claim("w6", "x", 1)
			return errOnly(tw.b.s.Abort(tw.b.ctx, tw.ref("ab"), norn.ErrorInfo{Code: "bad_input"}))
		}},
		{"cancel", func(tw *twin) any { got, err := tw.b.s.Cancel(tw.b.ctx, "cx"); return answer(got, err) }},
		{"update", func(tw *twin) any {
			got, err := tw.b.s.Update(tw.b.ctx, "upd", norn.Update{Priority: ptr(uint32(3)), Labels: map[string]string{"l": "m"}})
			return answer(got, err)
		}},
		{"transact", func(tw *twin) any {
			got, err := tw.b.s.Transact(tw.b.ctx, norn.Txn{
				Submit:  []norn.NewTask{{ID: "tx1", Queue: "c"}},
				Update:  []norn.TxnUpdate{{ID: "upd", Update: norn.Update{RunAt: ptr(tw.now().Add(time.Hour))}}},
				Cancel:  []string{"late"},
				Require: []norn.Requirement{{ID: "a"}}})
			return answer(got, err)
		}},
		{"a transaction requiring what it submits", func(tw *twin) any {
			got, err := tw.b.s.Transact(tw.b.ctx, norn.Txn{Submit: []norn.NewTask{{ID: "tx2", Queue: "c"}},
				Require: []norn.Requirement{{ID: "tx2"}}})
			return answer(got, err)
		}},
		{"a transaction whose requirement fails", func(tw *twin) any {
			got, err := tw.b.s.Transact(tw.b.ctx, norn.Txn{Submit: []norn.NewTask{{ID: "tx3", Queue: "c"}},
				Cancel: []string{"upd"}, Require: []norn.Requirement{{ID: "a", Version: 1}}})
			return answer(got, err)
		}},
		{"an hour passes", func(tw *twin) any { return tw.advance(time.Hour) }},
		{"claim the retry", func(tw *twin) any { return tw.claim("w2", "d", 5) }},
		{"retry an aborted task", func(tw *twin) any {
			got, err := tw.b.s.Retry(tw.b.ctx, "ab", norn.RetryOptions{})
			return answer(got, err)
		}},
		{"delete", func(tw *twin) any { return errOnly(tw.b.s.Delete(tw.b.ctx, "cx")) }},
		{"a batch and its callback", func(tw *twin) any {
			got, err := tw.b.s.CreateBatch(tw.b.ctx, norn.NewBatch{ID: "bt", Seal: true,
				OnComplete: &norn.NewTask{Queue: "cb"}, Tasks: []norn.NewTask{{ID: "m1", Queue: "b"}, {ID: "m2", Queue: "b"}}})
			return answer(got, err)
		}},
		{"its members end", func(tw *twin) any {
			tw.claim("w7", "b", 2)
			return answer(errorsOf(tw.b.s.Complete(tw.b.ctx, tw.ref("m1"), nil),
				tw.b.s.Fail(tw.b.ctx, tw.ref("m2"), norn.ErrorInfo{Code: "no"})), nil)
		}},
	}
}

func errorsOf(errs ...error) []string {
	var out []string
	for _, err := range errs {
		out = append(out, fmt.Sprint(err))
	}
	return out
}

// canonAnswer renders an answer as JSON with tasks canonical (canonTask)
// and errors as their code, field and message.
func canonAnswer(v any) string {
	b, err := json.Marshal(canonValue(v))
	if err != nil {
		return fmt.Sprintf("unencodable %T: %v", v, err)
	}
	return string(b)
}

func canonValue(v any) any {
	switch x := v.(type) {
	case struct {
		V   any
		Err error
	}:
		return []any{canonValue(x.V), canonValue(x.Err)}
	case *norn.Task:
		if x == nil {
			return nil
		}
		return json.RawMessage(canonTask(microTask(x)))
	case []*norn.Task:
		return canonEach(x)
	case []norn.Submitted:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = []any{s.Duplicate, canonValue(s.Task)}
		}
		return out
	case *norn.TxnResult:
		if x == nil {
			return nil
		}
		return []any{canonValue(x.Submitted), canonValue(x.Updated), canonValue(x.Cancelled), x.Deleted}
	case *norn.BatchCreated:
		if x == nil {
			return nil
		}
		return []any{x.Batch, canonValue(x.Tasks)}
	case []any:
		return canonEach(x)
	case []norn.QueueInfo:
		return canonEach(x)
	case norn.QueueInfo:
		x.ClaimPath = norn.ClaimPath{} // how one store's claims go: only it has several ways
		return x
	case *norn.Error:
		if x == nil {
			return nil
		}
		return []any{x.Code, x.Field, x.Message}
	case error:
		if e, ok := x.(*norn.Error); ok {
			return canonValue(e)
		}
		return x.Error()
	case time.Time:
		return x.UTC().Truncate(time.Microsecond)
	}
	return v
}

// microTask is tk with its times cut to microseconds, which is what
// PostgreSQL keeps of a time: a retry's backoff, say, is computed in
// nanoseconds and stored as microseconds there.
func microTask(tk *norn.Task) *norn.Task {
	c := tk.Clone()
	if generated(c.ID) {
		c.ID = "generated"
	}
	for _, t := range []*time.Time{&c.Created, &c.Updated, &c.RunAt, &c.Deadline, &c.Started, &c.ExpiresAt} {
		*t = t.Truncate(time.Microsecond)
	}
	for i := range c.History {
		c.History[i].Time = c.History[i].Time.Truncate(time.Microsecond)
	}
	return c
}

func canonEach[T any](xs []T) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = canonValue(x)
	}
	return out
}

func sortedKeys(ms ...map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

// twinFlows: the shaping and workflow features.
func twinFlows() []twinStep {
	return []twinStep{
		{"submit shaped tasks", func(tw *twin) any {
			now := tw.now()
			got, err := tw.b.s.Submit(tw.b.ctx,
				norn.NewTask{ID: "s1", Queue: "sq", SequenceKey: "acct"},
				norn.NewTask{ID: "s2", Queue: "sq", SequenceKey: "acct"},
				norn.NewTask{ID: "db1", Queue: "dq", UniqueKey: "k", OnDuplicate: norn.DuplicateReplace, Delay: dur(time.Minute), DebounceMax: dur(5 * time.Minute)},
				norn.NewTask{ID: "ex", Queue: "eq", ExpiresAt: now.Add(30 * time.Second)},
				norn.NewTask{ID: "rt", Queue: "rq", MaxRuntime: dur(time.Minute), Timeout: dur(time.Hour)},
				norn.NewTask{ID: "ck", Queue: "kq", ConcurrencyKey: "tenant"},
				norn.NewTask{ID: "par", Queue: "pq"},
				norn.NewTask{ID: "runs", Queue: "dq2", DependsOn: []string{"ab2"}, OnDependencyFailure: norn.DependencyRun},
				norn.NewTask{ID: "ab2", Queue: "x2", MaxAttempts: ptr(1), Retry: &norn.RetryPolicy{MaxRetries: 0}},
			)
			return answer(got, err)
		}},
		{"debounce replaces", func(tw *twin) any {
			got, err := tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "db2", Queue: "dq", UniqueKey: "k", OnDuplicate: norn.DuplicateReplace,
				Delay: dur(time.Minute), DebounceMax: dur(5 * time.Minute), Spec: json.RawMessage(`{"v": 2}`)})
			return answer(got, err)
		}},
		{"claim the sequence head and fail it", func(tw *twin) any {
			tw.claim("w8", "sq", 5)
			return errOnly(tw.b.s.Fail(tw.b.ctx, tw.ref("s1"), norn.ErrorInfo{Code: "seq", RetryIn: dur(time.Second)}))
		}},
		{"a parent awaits children", func(tw *twin) any {
			tw.claim("w9", "pq", 1)
			got, err := tw.b.s.Await(tw.b.ctx, tw.ref("par"), norn.AwaitRequest{Tasks: []norn.NewTask{{ID: "ch1", Queue: "cq"}, {ID: "ch2", Queue: "cq"}}})
			if got != nil {
				return answer([]any{got.Task, got.Children}, err)
			}
			return answer(nil, err)
		}},
		{"the children end", func(tw *twin) any {
			tw.claim("w9", "cq", 2)
			return answer(errorsOf(tw.b.s.Complete(tw.b.ctx, tw.ref("ch1"), json.RawMessage(`1`)),
				tw.b.s.Complete(tw.b.ctx, tw.ref("ch2"), json.RawMessage(`2`))), nil)
		}},
		{"a lease runs to its max_runtime", func(tw *twin) any {
			tw.claim("w10", "rq", 1)
			return tw.advance(61 * time.Second)
		}},
		{"a dependency aborts and its dependent runs", func(tw *twin) any {
			tw.claim("w11", "x2", 1)
			return errOnly(tw.b.s.Fail(tw.b.ctx, tw.ref("ab2"), norn.ErrorInfo{Code: "gone"}))
		}},
		{"a lease batch of every kind", func(tw *twin) any {
			tw.claim("w12", "kq", 1)
			tw.claim("w12", "dq2", 1)
			got, err := tw.b.s.LeaseBatch(tw.b.ctx, []norn.LeaseOp{
				{Op: norn.OpHeartbeat, LeaseRef: tw.ref("ck"), Heartbeat: norn.Heartbeat{Progress: ptr(0.25)}},
				{Op: norn.OpComplete, LeaseRef: tw.ref("runs"), Result: json.RawMessage(`"done"`)},
				{Op: norn.OpFail, LeaseRef: tw.ref("nobody"), Error: &norn.ErrorInfo{Code: "x"}},
			})
			return answer(got, err)
		}},
		{"ten minutes pass", func(tw *twin) any { return tw.advance(10 * time.Minute) }},
		{"queue settings", func(tw *twin) any {
			got, err := tw.b.s.UpdateQueue(tw.b.ctx, "q", norn.QueueUpdate{Paused: ptr(true), MaxAttempts: ptr(3)})
			return answer(got, err)
		}},
	}
}

// twinBulk: the calls over many tasks.
func twinBulk() []twinStep {
	return []twinStep{
		{"get many", func(tw *twin) any {
			found, missing, err := tw.b.s.GetMany(tw.b.ctx, []string{"a", "nope", "dep", "a"})
			return answer([]any{found, missing}, err)
		}},
		{"count grouped", func(tw *twin) any {
			got, err := tw.b.s.CountGrouped(tw.b.ctx, norn.Filter{})
			return answer(got, err)
		}},
		{"list by priority", func(tw *twin) any {
			got, err := tw.b.s.List(tw.b.ctx, norn.Query{Order: norn.OrderPriority, Limit: 5, Summary: true})
			return answer(got.Tasks, err)
		}},
		{"retry matching", func(tw *twin) any {
			n, err := tw.b.s.RetryMatching(tw.b.ctx, norn.Filter{Statuses: []norn.Status{norn.StatusAborted}})
			return answer(n, err)
		}},
		{"cancel matching", func(tw *twin) any {
			n, err := tw.b.s.CancelMatching(tw.b.ctx, norn.Filter{Queues: []string{"c", "x"}})
			return answer(n, err)
		}},
		{"delete matching", func(tw *twin) any {
			n, err := tw.b.s.DeleteMatching(tw.b.ctx, norn.Filter{Statuses: []norn.Status{norn.StatusCancelled}})
			return answer(n, err)
		}},
		{"a week passes", func(tw *twin) any { return tw.advance(8 * 24 * time.Hour) }},
	}
}

// twinLimits: schedules, flow limits, fair and grouped claims, batch claims
// and redrives.
func twinLimits() []twinStep {
	claimReq := func(tw *twin, req norn.ClaimRequest) any {
		got, err := tw.b.s.Claim(tw.b.ctx, req)
		for _, tk := range got {
			tw.held[tk.ID] = tk
		}
		return answer(got, err)
	}
	return []twinStep{
		{"a schedule", func(tw *twin) any {
			got, err := tw.b.s.PutSchedule(tw.b.ctx, norn.Schedule{Name: "every5", Queue: "cron", Cron: "*/5 * * * *", Labels: map[string]string{"k": "v"}})
			return answer(got, err)
		}},
		{"trigger it", func(tw *twin) any {
			got, err := tw.b.s.TriggerSchedule(tw.b.ctx, "every5")
			if got.Task != nil {
				got.Task.ID = "" // generated
			}
			return answer([]any{got.Duplicate, got.Task}, err)
		}},
		{"limited queues", func(tw *twin) any {
			_, err1 := tw.b.s.UpdateQueue(tw.b.ctx, "lim", norn.QueueUpdate{MaxRunning: ptr(2), KeyLimit: ptr(1)})
			_, err2 := tw.b.s.UpdateQueue(tw.b.ctx, "fq", norn.QueueUpdate{FairBy: ptr(norn.FairByConcurrencyKey)})
			got, err3 := tw.b.s.UpdateQueue(tw.b.ctx, "rl", norn.QueueUpdate{RateLimit: &norn.RateLimit{PerSecond: 1, Burst: 2}})
			return answer([]any{errorsOf(err1, err2), got}, err3)
		}},
		{"submit to them", func(tw *twin) any {
			var nts []norn.NewTask
			for i, key := range []string{"k1", "k1", "k2", "k3", "k2"} {
				nts = append(nts, norn.NewTask{ID: fmt.Sprintf("lim%d", i), Queue: "lim", ConcurrencyKey: key},
					norn.NewTask{ID: fmt.Sprintf("fq%d", i), Queue: "fq", ConcurrencyKey: key},
					norn.NewTask{ID: fmt.Sprintf("rl%d", i), Queue: "rl"},
					norn.NewTask{ID: fmt.Sprintf("gb%d", i), Queue: "gb", ConcurrencyKey: key})
			}
			got, err := tw.b.s.Submit(tw.b.ctx, nts...)
			return answer(len(got), err)
		}},
		{"claim under the limits", func(tw *twin) any {
			return []any{tw.claim("w13", "lim", 5), tw.claim("w13", "fq", 3), tw.claim("w13", "rl", 5)}
		}},
		{"a grouped claim", func(tw *twin) any {
			return claimReq(tw, norn.ClaimRequest{Worker: "w14", Queues: []string{"gb"}, N: 5, Min: 1, GroupBy: norn.FairByConcurrencyKey})
		}},
		{"a batch claim short of its min", func(tw *twin) any {
			return claimReq(tw, norn.ClaimRequest{Worker: "w14", Queues: []string{"gb"}, N: 10, Min: 10})
		}},
		{"complete a limited task and claim again", func(tw *twin) any {
			err := tw.b.s.Complete(tw.b.ctx, tw.ref("lim0"), nil)
			return []any{errOnly(err), tw.claim("w13", "lim", 5)}
		}},
		{"the sequences", func(tw *twin) any {
			one, err1 := tw.b.s.Sequence(tw.b.ctx, "sq", "acct")
			all, err2 := tw.b.s.Sequences(tw.b.ctx, "sq", norn.SequenceQuery{})
			return answer([]any{one, all}, errors.Join(err1, err2))
		}},
		{"redrive with dependents", func(tw *twin) any {
			tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "p1", Queue: "rd", MaxAttempts: ptr(1)},
				norn.NewTask{ID: "c1", Queue: "rd2", DependsOn: []string{"p1"}})
			tw.claim("w15", "rd", 1)
			tw.b.s.Fail(tw.b.ctx, tw.ref("p1"), norn.ErrorInfo{Code: "e"})
			got, err := tw.b.s.Retry(tw.b.ctx, "p1", norn.RetryOptions{WithDependents: true})
			return answer(got, err)
		}},
		{"five minutes pass", func(tw *twin) any { return tw.advance(5 * time.Minute) }},
		{"the schedule fired", func(tw *twin) any {
			got, err := tw.b.s.GetSchedule(tw.b.ctx, "every5")
			if got != nil {
				got.LastTask = ""
			}
			return answer(got, err)
		}},
	}
}

// generated says whether id is one a store drew (a UUID), not one the
// workload chose.
func generated(id string) bool {
	_, err := uuid.Parse(id)
	return err == nil
}

// twinMore: the rest of the surface — batches and schedules managed,
// signals sent before a wait, key-scoped snoozes and key rates, queue
// expiry, an await that continues past a failed child, updates of waiting
// tasks, stats.
func twinMore() []twinStep {
	return []twinStep{
		{"an open batch, listed, sealed and deleted", func(tw *twin) any {
			_, err1 := tw.b.s.CreateBatch(tw.b.ctx, norn.NewBatch{ID: "ob", Labels: map[string]string{"t": "x"}})
			_, err2 := tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "obm", Queue: "ob", Batch: "ob"})
			list, err3 := tw.b.s.ListBatches(tw.b.ctx, norn.BatchQuery{Labels: map[string]string{"t": "x"}})
			sealed, err4 := tw.b.s.SealBatch(tw.b.ctx, "ob")
			n, err5 := tw.b.s.DeleteBatch(tw.b.ctx, "ob", true)
			got, err6 := tw.b.s.GetBatch(tw.b.ctx, "ob")
			return answer([]any{list, sealed, n, got}, errors.Join(err1, err2, err3, err4, err5, err6))
		}},
		{"schedules listed, changed and deleted", func(tw *twin) any {
			_, err1 := tw.b.s.PutSchedule(tw.b.ctx, norn.Schedule{Name: "hourly", Queue: "cron2", Cron: "0 * * * *", Timezone: "Europe/Berlin"})
			up, err2 := tw.b.s.UpdateSchedule(tw.b.ctx, "hourly", norn.ScheduleUpdate{Cron: ptr("30 * * * *")})
			all, err3 := tw.b.s.ListSchedules(tw.b.ctx)
			err4 := tw.b.s.DeleteSchedule(tw.b.ctx, "hourly")
			_, err5 := tw.b.s.GetSchedule(tw.b.ctx, "hourly")
			return answer([]any{up, all, errorsOf(err5)}, errors.Join(err1, err2, err3, err4))
		}},
		{"a signal before the wait", func(tw *twin) any {
			tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "sig2", Queue: "g2"})
			tw.claim("w16", "g2", 1)
			sent, err1 := tw.b.s.Signal(tw.b.ctx, "sig2", norn.NewSignal{Name: "early"})
			got, err2 := tw.b.s.Snooze(tw.b.ctx, tw.ref("sig2"), norn.Snooze{UntilSignal: "early", Timeout: dur(time.Minute)})
			return answer([]any{sent, got}, errors.Join(err1, err2))
		}},
		{"a key-scoped snooze under a key rate", func(tw *twin) any {
			_, err1 := tw.b.s.UpdateQueue(tw.b.ctx, "kr", norn.QueueUpdate{KeyRateLimit: &norn.RateLimit{PerSecond: 10, Burst: 10}})
			tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "kr1", Queue: "kr", ConcurrencyKey: "api"}, norn.NewTask{ID: "kr2", Queue: "kr", ConcurrencyKey: "api"})
			tw.claim("w17", "kr", 1)
			got, err2 := tw.b.s.Snooze(tw.b.ctx, tw.ref("kr1"), norn.Snooze{Delay: dur(time.Minute), Scope: norn.SnoozeScopeKey})
			return []any{answer(got, errors.Join(err1, err2)), tw.claim("w17", "kr", 5)}
		}},
		{"a queue that expires its tasks", func(tw *twin) any {
			_, err := tw.b.s.UpdateQueue(tw.b.ctx, "xq", norn.QueueUpdate{ExpireIn: ptr(dur(time.Minute))})
			got, err2 := tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "xq1", Queue: "xq"}, norn.NewTask{ID: "xq2", Queue: "xq", Delay: dur(2 * time.Minute)})
			return answer(got, errors.Join(err, err2))
		}},
		{"an await that continues past a failed child", func(tw *twin) any {
			tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "par2", Queue: "pq2"})
			tw.claim("w18", "pq2", 1)
			got, err := tw.b.s.Await(tw.b.ctx, tw.ref("par2"), norn.AwaitRequest{OnChildFailure: norn.ChildFailureContinue,
				Tasks: []norn.NewTask{{ID: "ch3", Queue: "cq2", MaxAttempts: ptr(1)}}})
			tw.claim("w18", "cq2", 1)
			err2 := tw.b.s.Fail(tw.b.ctx, tw.ref("ch3"), norn.ErrorInfo{Code: "child"})
			if got != nil {
				return answer([]any{got.Task, got.Children}, errors.Join(err, err2))
			}
			return answer(nil, errors.Join(err, err2))
		}},
		{"updates of waiting tasks", func(tw *twin) any {
			tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "w1t", Queue: "wq", Delay: dur(time.Hour)}, norn.NewTask{ID: "w2t", Queue: "wq", DependsOn: []string{"w1t"}})
			a, err1 := tw.b.s.Update(tw.b.ctx, "w1t", norn.Update{RunAt: ptr(tw.now().Add(-time.Minute))})
			c, err2 := tw.b.s.Update(tw.b.ctx, "w2t", norn.Update{Priority: ptr(uint32(9)), IfVersion: 1})
			d, err3 := tw.b.s.Update(tw.b.ctx, "w2t", norn.Update{Priority: ptr(uint32(1)), IfVersion: 1})
			return []any{answer(a, err1), answer(c, err2), answer(d, err3)}
		}},
		{"two minutes pass", func(tw *twin) any { return tw.advance(2 * time.Minute) }},
		{"stats", func(tw *twin) any {
			st, err := tw.b.s.Stats(tw.b.ctx)
			st.Workers, st.ActiveWorkers = 0, 0 // who registered is the store's own book
			return answer(st, err)
		}},
	}
}

// twinEdges: unique keys across their window, claims over several queues,
// failures cascading through dependencies, retries at a time.
func twinEdges() []twinStep {
	return []twinStep{
		{"a unique key held within its window, then free", func(tw *twin) any {
			a, err1 := tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "uf1", Queue: "uq", UniqueKey: "w", UniqueFor: dur(time.Minute)})
			tw.claim("w19", "uq", 1)
			err2 := tw.b.s.Complete(tw.b.ctx, tw.ref("uf1"), nil)
			b, err3 := tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "uf2", Queue: "uq", UniqueKey: "w", UniqueFor: dur(time.Minute)})
			tw.advance(2 * time.Minute)
			c, err4 := tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "uf3", Queue: "uq", UniqueKey: "w", UniqueFor: dur(time.Minute)})
			return answer([]any{a, b, c}, errors.Join(err1, err2, err3, err4))
		}},
		{"keep or replace a duplicate", func(tw *twin) any {
			a, err1 := tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "dk1", Queue: "dkq", UniqueKey: "z", Spec: json.RawMessage(`1`)},
				norn.NewTask{ID: "dk2", Queue: "dkq", UniqueKey: "z", OnDuplicate: norn.DuplicateKeep, Spec: json.RawMessage(`2`)})
			b, err2 := tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "dk3", Queue: "dkq", UniqueKey: "z", OnDuplicate: norn.DuplicateReplace, Spec: json.RawMessage(`3`)})
			return answer([]any{a, b}, errors.Join(err1, err2))
		}},
		{"claims over two queues in order with a lease length", func(tw *twin) any {
			var nts []norn.NewTask
			for i := range 4 {
				nts = append(nts, norn.NewTask{ID: fmt.Sprintf("wa%d", i), Queue: "wa"}, norn.NewTask{ID: fmt.Sprintf("wb%d", i), Queue: "wb"})
			}
			tw.b.s.Submit(tw.b.ctx, nts...)
			// Weights would draw the queue order at random: not the same on
			// both stores, so not here.
			got, err := tw.b.s.Claim(tw.b.ctx, norn.ClaimRequest{Worker: "w20", Queues: []string{"wb", "wa"}, N: 6, Timeout: dur(time.Minute)})
			for _, tk := range got {
				tw.held[tk.ID] = tk
			}
			return answer(got, err)
		}},
		{"a chain aborted by a failure, redriven at a time", func(tw *twin) any {
			tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "ch-a", Queue: "chq", MaxAttempts: ptr(1)},
				norn.NewTask{ID: "ch-b", Queue: "chq2", DependsOn: []string{"ch-a"}},
				norn.NewTask{ID: "ch-c", Queue: "chq2", DependsOn: []string{"ch-b"}})
			tw.claim("w21", "chq", 1)
			err1 := tw.b.s.Abort(tw.b.ctx, tw.ref("ch-a"), norn.ErrorInfo{Code: "bad"})
			got, err2 := tw.b.s.Retry(tw.b.ctx, "ch-a", norn.RetryOptions{RunAt: tw.now().Add(time.Hour), WithDependents: true})
			return answer(got, errors.Join(err1, err2))
		}},
		{"a dependency deleted", func(tw *twin) any {
			tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "dd-a", Queue: "ddq", Delay: dur(time.Hour)},
				norn.NewTask{ID: "dd-b", Queue: "ddq", DependsOn: []string{"dd-a"}})
			return errOnly(tw.b.s.Delete(tw.b.ctx, "dd-a"))
		}},
		{"an hour and a minute pass", func(tw *twin) any { return tw.advance(61 * time.Minute) }},
	}
}

// twinSettings: per-key settings, a halting sequence, schedules that
// skip overlaps and catch up on every missed tick.
func twinSettings() []twinStep {
	return []twinStep{
		{"per-key settings", func(tw *twin) any {
			_, err := tw.b.s.UpdateQueue(tw.b.ctx, "ks", norn.QueueUpdate{KeyLimit: ptr(5), FairBy: ptr(norn.FairByConcurrencyKey),
				Keys: map[string]*norn.KeySettings{"vip": {Limit: 2, Weight: 3}, "slow": {Limit: 1}}})
			got, err2 := tw.b.s.Queue(tw.b.ctx, "ks")
			return answer(got, errors.Join(err, err2))
		}},
		{"a sequence halts on its failed head", func(tw *twin) any {
			tw.b.s.Submit(tw.b.ctx, norn.NewTask{ID: "hs1", Queue: "hq", SequenceKey: "acc", MaxAttempts: ptr(1)},
				norn.NewTask{ID: "hs2", Queue: "hq", SequenceKey: "acc"})
			tw.claim("w22", "hq", 5)
			err := tw.b.s.Fail(tw.b.ctx, tw.ref("hs1"), norn.ErrorInfo{Code: "x"})
			seq, err2 := tw.b.s.Sequence(tw.b.ctx, "hq", "acc")
			return []any{answer(seq, errors.Join(err, err2)), tw.claim("w22", "hq", 5)}
		}},
		{"schedules that skip overlaps and catch up", func(tw *twin) any {
			a, err1 := tw.b.s.PutSchedule(tw.b.ctx, norn.Schedule{Name: "skip", Queue: "sk", Cron: "* * * * *", Overlap: norn.OverlapSkip})
			b, err2 := tw.b.s.PutSchedule(tw.b.ctx, norn.Schedule{Name: "all", Queue: "ca", Cron: "* * * * *", CatchUp: norn.CatchUpAll})
			return answer([]any{a, b}, errors.Join(err1, err2))
		}},
		{"five minutes pass for them", func(tw *twin) any { return tw.advance(5 * time.Minute) }},
		{"the schedules after", func(tw *twin) any {
			a, err1 := tw.b.s.GetSchedule(tw.b.ctx, "skip")
			b, err2 := tw.b.s.GetSchedule(tw.b.ctx, "all")
			for _, sc := range []*norn.Schedule{a, b} {
				if sc != nil {
					sc.LastTask = ""
				}
			}
			return answer([]any{a, b}, errors.Join(err1, err2))
		}},
	}
}
