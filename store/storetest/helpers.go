package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// testBundle is what a subtest gets next to the store under test: its own
// clock and context, and helpers that arrange state and check it, bound to
// the subtest's t so a failure is reported where it happened.
type testBundle struct {
	t     *testing.T
	s     norn.Store
	clock *FakeClock
	ctx   context.Context
}

// setupFunc gives a subtest a fresh, empty store and its bundle.
type setupFunc func(t *testing.T) (norn.Store, *testBundle)

func newSetup(f Factory) setupFunc {
	return func(t *testing.T) (norn.Store, *testBundle) {
		t.Helper()
		clock := NewFakeClock()
		s := f(t, clock)
		return s, &testBundle{t: t, s: s, clock: clock, ctx: t.Context()}
	}
}

// with returns the bundle bound to t, for rows of a table that share one
// store but each run as their own (sequential) subtest.
func (b *testBundle) with(t *testing.T) *testBundle {
	c := *b
	c.t, c.ctx = t, t.Context()
	return &c
}

func (b *testBundle) now() time.Time { return b.clock.Now() }

// submit stores new tasks and fails the test on any error or duplicate.
func (b *testBundle) submit(nts ...norn.NewTask) []*norn.Task {
	b.t.Helper()
	res, err := b.s.Submit(b.ctx, nts...)
	b.must(err, "Submit")
	if len(res) != len(nts) {
		b.t.Fatalf("Submit returned %d results for %d tasks", len(res), len(nts))
	}
	out := make([]*norn.Task, len(res))
	for i, r := range res {
		if r.Duplicate {
			b.t.Fatalf("Submit: task %d (%q) unexpectedly reported as duplicate", i, r.Task.ID)
		}
		if r.Task == nil {
			b.t.Fatalf("Submit: result %d has no task", i)
		}
		out[i] = r.Task
	}
	return out
}

func (b *testBundle) submitOne(nt norn.NewTask) *norn.Task {
	b.t.Helper()
	return b.submit(nt)[0]
}

// submitMany submits tasks in batches of 1000.
func (b *testBundle) submitMany(nts []norn.NewTask) {
	b.t.Helper()
	for len(nts) > 0 {
		n := min(1000, len(nts))
		b.submit(nts[:n]...)
		nts = nts[n:]
	}
}

func (b *testBundle) get(id string) *norn.Task {
	b.t.Helper()
	tk, err := b.s.Get(b.ctx, id)
	b.must(err, "Get(%q)", id)
	return tk
}

// gone asserts that a task no longer exists.
func (b *testBundle) gone(id string) {
	b.t.Helper()
	_, err := b.s.Get(b.ctx, id)
	if !errors.Is(err, norn.ErrNotFound) {
		b.t.Fatalf("Get(%q) after removal: err = %v, want not_found", id, err)
	}
}

// status asserts a task's status and returns the task.
func (b *testBundle) status(id string, want norn.Status) *norn.Task {
	b.t.Helper()
	tk := b.get(id)
	if tk.Status != want {
		b.t.Fatalf("task %q: status %s, want %s (history %s)", id, tk.Status, want, historyTypes(tk))
	}
	return tk
}

func (b *testBundle) claimReq(req norn.ClaimRequest) []*norn.Task {
	b.t.Helper()
	ts, err := b.s.Claim(b.ctx, req)
	b.must(err, "Claim(%+v)", req)
	for _, tk := range ts {
		if tk.Status != norn.StatusRunning || tk.Owner != req.Worker {
			b.t.Fatalf("Claim returned task %q with status %s owner %q, want running owned by %q",
				tk.ID, tk.Status, tk.Owner, req.Worker)
		}
	}
	return ts
}

// claim claims exactly one task from queues.
func (b *testBundle) claim(worker string, queues ...string) *norn.Task {
	b.t.Helper()
	ts := b.claimReq(norn.ClaimRequest{Worker: worker, Queues: queues, N: 1})
	if len(ts) != 1 {
		b.t.Fatalf("Claim(%s, %v): got %d tasks, want 1", worker, queues, len(ts))
	}
	return ts[0]
}

// claimNone asserts that nothing is claimable from queues.
func (b *testBundle) claimNone(queues ...string) {
	b.t.Helper()
	ts := b.claimReq(norn.ClaimRequest{Worker: "probe", Queues: queues, N: 10})
	if len(ts) != 0 {
		b.t.Fatalf("Claim(%v): got %d tasks (first %q, %s), want none", queues, len(ts), ts[0].ID, ts[0].Status)
	}
}

// must fails the subtest if err is not nil, naming the call.
func (b *testBundle) must(err error, format string, args ...any) {
	b.t.Helper()
	if err != nil {
		b.t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}

// settled asserts that time passing changes nothing about a finished task
// and leaves nothing to claim in its queue.
func (b *testBundle) settled(id string, d time.Duration, queue string) {
	b.t.Helper()
	g := b.get(id)
	b.advance(d)
	sameTask(b.t, fmt.Sprintf("task %s %v later", id, d), g, b.get(id))
	b.claimNone(queue)
}

// claimed submits nt and claims it as worker.
func (b *testBundle) claimed(worker string, nt norn.NewTask) *norn.Task {
	b.t.Helper()
	return b.claimID(worker, b.submitOne(nt).ID, nt.Queue)
}

// claimID claims exactly one task from queues and asserts it is id.
func (b *testBundle) claimID(worker, id string, queues ...string) *norn.Task {
	b.t.Helper()
	c := b.claim(worker, queues...)
	if c.ID != id {
		b.t.Fatalf("Claim(%s, %v): claimed %q, want %s", worker, queues, c.ID, id)
	}
	return c
}

func (b *testBundle) heartbeat(tk *norn.Task, hb norn.Heartbeat) time.Time {
	b.t.Helper()
	dl, err := b.s.Heartbeat(b.ctx, ref(tk), hb)
	b.must(err, "Heartbeat(%q)", tk.ID)
	return dl
}

func (b *testBundle) appendLog(tk *norn.Task, data string) norn.LogEntry {
	b.t.Helper()
	le, err := b.s.AppendLog(b.ctx, ref(tk), norn.LogAppend{Data: json.RawMessage(data)})
	b.must(err, "AppendLog(%q)", tk.ID)
	return le
}

// logLen asserts a task's update log has n entries.
func (b *testBundle) logLen(id string, n int) {
	b.t.Helper()
	logs, err := b.s.ReadLog(b.ctx, id, 0, 0)
	if err != nil || len(logs) != n {
		b.t.Fatalf("ReadLog(%q): %d entries (%+v), %v; want %d", id, len(logs), logs, err, n)
	}
}

func (b *testBundle) fail(tk *norn.Task, code string) {
	b.t.Helper()
	b.must(b.s.Fail(b.ctx, ref(tk), norn.ErrorInfo{Code: code}), "Fail(%q)", tk.ID)
}

func (b *testBundle) abort(tk *norn.Task, code string) {
	b.t.Helper()
	b.must(b.s.Abort(b.ctx, ref(tk), norn.ErrorInfo{Code: code}), "Abort(%q)", tk.ID)
}

func (b *testBundle) yield(tk *norn.Task) {
	b.t.Helper()
	b.must(b.s.Yield(b.ctx, ref(tk)), "Yield(%q)", tk.ID)
}

func (b *testBundle) cancel(id string) *norn.Task {
	b.t.Helper()
	tk, err := b.s.Cancel(b.ctx, id)
	b.must(err, "Cancel(%q)", id)
	return tk
}

func (b *testBundle) update(id string, u norn.Update) *norn.Task {
	b.t.Helper()
	tk, err := b.s.Update(b.ctx, id, u)
	b.must(err, "Update(%q)", id)
	return tk
}

func (b *testBundle) delete(id string) {
	b.t.Helper()
	b.must(b.s.Delete(b.ctx, id), "Delete(%q)", id)
}

// count asserts how many tasks match f.
func (b *testBundle) count(f norn.Filter, want int64) {
	b.t.Helper()
	n, err := b.s.Count(b.ctx, f)
	if err != nil || n != want {
		b.t.Fatalf("Count(%+v) = %d, %v; want %d", f, n, err, want)
	}
}

func (b *testBundle) sweep() {
	b.t.Helper()
	_, err := b.s.Sweep(b.ctx)
	b.must(err, "Sweep")
}

// advance moves the fake clock and runs the monitor, so everything due by
// then has happened (whether Sweep or the store's own monitor did it).
func (b *testBundle) advance(d time.Duration) {
	b.t.Helper()
	b.clock.Advance(d)
	b.sweep()
}

func (b *testBundle) complete(tk *norn.Task, result string) {
	b.t.Helper()
	var raw json.RawMessage
	if result != "" {
		raw = json.RawMessage(result)
	}
	b.must(b.s.Complete(b.ctx, ref(tk), raw), "Complete(%q)", tk.ID)
}

// snapshot returns every task in the store as canonical JSON keyed by id.
func (b *testBundle) snapshot() map[string]string {
	b.t.Helper()
	it, err := b.s.Stream(b.ctx, norn.Query{})
	out := map[string]string{}
	for _, tk := range collect(b.t, it, err) {
		out[tk.ID] = canonTask(tk)
	}
	return out
}

// unchanged asserts the store holds exactly the snapshot before.
func (b *testBundle) unchanged(what string, before map[string]string) {
	b.t.Helper()
	after := b.snapshot()
	for id, was := range before {
		a, ok := after[id]
		if !ok {
			b.t.Errorf("%s: task %q disappeared", what, id)
		} else if a != was {
			b.t.Errorf("%s: task %q changed:\nbefore %s\nafter  %s", what, id, was, a)
		}
	}
	for id, a := range after {
		if _, ok := before[id]; !ok {
			b.t.Errorf("%s: task %q appeared: %s", what, id, a)
		}
	}
	if b.t.Failed() {
		b.t.FailNow()
	}
}

// sameTask asserts two views of a task are identical (times compared as
// instants, JSON semantically).
func sameTask(t *testing.T, what string, want, got *norn.Task) {
	t.Helper()
	if w, g := canonTask(want), canonTask(got); w != g {
		t.Fatalf("%s: task differs:\nwant %s\ngot  %s", what, w, g)
	}
}

// canonTask renders a task as JSON with UTC times, canonical spec/result
// and empty collections as absent, so representations of equal tasks match.
func canonTask(tk *norn.Task) string {
	c := tk.Clone()
	utc := func(t time.Time) time.Time {
		if t.IsZero() {
			return time.Time{}
		}
		return t.UTC().Round(0)
	}
	c.Created, c.Updated, c.RunAt, c.Deadline = utc(c.Created), utc(c.Updated), utc(c.RunAt), utc(c.Deadline)
	c.Started = utc(c.Started)
	for i := range c.History {
		c.History[i].Time = utc(c.History[i].Time)
	}
	if len(c.Labels) == 0 {
		c.Labels = nil
	}
	if len(c.DependsOn) == 0 {
		c.DependsOn = nil
	}
	if len(c.Errors) == 0 {
		c.Errors = nil
	}
	if len(c.History) == 0 {
		c.History = nil
	}
	c.Spec = json.RawMessage(canonJSON(c.Spec))
	c.Result = json.RawMessage(canonJSON(c.Result))
	if len(c.Spec) == 0 {
		c.Spec = nil
	}
	if len(c.Result) == 0 {
		c.Result = nil
	}
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Sprintf("<unmarshalable task: %v>", err)
	}
	return string(b)
}

// canonJSON re-encodes a JSON value with sorted keys and no spaces; "" for
// empty input and JSON null.
func canonJSON(raw []byte) string {
	if len(bytes.TrimSpace(raw)) == 0 {
		return ""
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "<invalid JSON: " + string(raw) + ">"
	}
	if v == nil {
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func jsonEq(t *testing.T, what string, got []byte, want string) {
	t.Helper()
	if g, w := canonJSON(got), canonJSON([]byte(want)); g != w {
		t.Fatalf("%s: JSON %s, want %s", what, g, w)
	}
}

func ref(tk *norn.Task) norn.LeaseRef {
	return norn.LeaseRef{TaskID: tk.ID, Worker: tk.Owner, Lease: tk.Lease}
}

// wantErr asserts err matches the sentinel (by code).
func wantErr(t *testing.T, what string, err error, sentinel *norn.Error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %s", what, sentinel.Code)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s: error %v (code %s), want %s", what, err, norn.CodeOf(err), sentinel.Code)
	}
}

// wantErrOneOf asserts err has one of the codes (for cases the contract
// leaves open between two classes).
func wantErrOneOf(t *testing.T, what string, err error, sentinels ...*norn.Error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want one of %v", what, codes(sentinels))
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("%s: error %v (code %s), want one of %v", what, err, norn.CodeOf(err), codes(sentinels))
}

func codes(ss []*norn.Error) []norn.Code {
	var out []norn.Code
	for _, s := range ss {
		out = append(out, s.Code)
	}
	return out
}

// wantField asserts err matches the sentinel and names field.
func wantField(t *testing.T, what string, err error, sentinel *norn.Error, field string) {
	t.Helper()
	wantErr(t, what, err, sentinel)
	var ne *norn.Error
	if !errors.As(err, &ne) {
		t.Fatalf("%s: error %v is not a *norn.Error", what, err)
	}
	if ne.Field != field {
		t.Fatalf("%s: error field %q, want %q (error: %v)", what, ne.Field, field, err)
	}
}

func eqTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !got.Equal(want) {
		t.Fatalf("%s: %v, want %v (off by %v)", what, got.UTC(), want.UTC(), got.Sub(want))
	}
}

func historyTypes(tk *norn.Task) []norn.HistoryType {
	var out []norn.HistoryType
	for _, h := range tk.History {
		out = append(out, h.Type)
	}
	return out
}

// lastHistory asserts the newest history entry's type and time and returns it.
func lastHistory(t *testing.T, tk *norn.Task, typ norn.HistoryType, at time.Time) norn.HistoryEntry {
	t.Helper()
	if len(tk.History) == 0 {
		t.Fatalf("task %q (%s): empty history, want last entry %s", tk.ID, tk.Status, typ)
	}
	h := tk.History[len(tk.History)-1]
	if h.Type != typ {
		t.Fatalf("task %q (%s): last history entry %s, want %s (history %v)", tk.ID, tk.Status, h.Type, typ, historyTypes(tk))
	}
	if !at.IsZero() && !h.Time.Equal(at) {
		t.Fatalf("task %q: %s entry at %v, want %v", tk.ID, typ, h.Time.UTC(), at.UTC())
	}
	return h
}

// lastError asserts the newest entry of Errors has code.
func lastError(t *testing.T, tk *norn.Task, code string) {
	t.Helper()
	if len(tk.Errors) == 0 {
		t.Fatalf("task %q: no errors recorded, want last code %q", tk.ID, code)
	}
	if got := tk.Errors[len(tk.Errors)-1].Code; got != code {
		t.Fatalf("task %q: last error code %q, want %q", tk.ID, got, code)
	}
}

func wantVersion(t *testing.T, what string, tk *norn.Task, want uint64) {
	t.Helper()
	if tk.Version != want {
		t.Fatalf("%s: task %q version %d, want %d", what, tk.ID, tk.Version, want)
	}
}

// collect drains a task iterator into ids.
func collect(t *testing.T, it norn.TaskIterator, err error) []*norn.Task {
	t.Helper()
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	defer it.Close()
	var out []*norn.Task
	for it.Next() {
		out = append(out, it.Item().Clone())
	}
	if err := it.Err(); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	return out
}

// listAll pages through List and returns every task in order.
func (b *testBundle) listAll(q norn.Query) []*norn.Task {
	b.t.Helper()
	var out []*norn.Task
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		if pages > 100000 {
			b.t.Fatalf("List: cursor never ends")
		}
		p, err := b.s.List(b.ctx, q)
		if err != nil {
			b.t.Fatalf("List(%+v): %v", q, err)
		}
		if q.Limit > 0 && len(p.Tasks) > q.Limit {
			b.t.Fatalf("List: page of %d tasks with limit %d", len(p.Tasks), q.Limit)
		}
		for _, tk := range p.Tasks {
			if seen[tk.ID] {
				b.t.Fatalf("List: task %q returned twice across pages", tk.ID)
			}
			seen[tk.ID] = true
			out = append(out, tk)
		}
		if p.NextCursor == "" {
			return out
		}
		if len(p.Tasks) == 0 {
			b.t.Fatalf("List: empty page with a next cursor")
		}
		q.Cursor = p.NextCursor
	}
}

// find returns the item of xs whose key is id, or fails naming what it is.
func find[T any](t *testing.T, what string, xs []T, id string, key func(T) string) T {
	t.Helper()
	for _, x := range xs {
		if key(x) == id {
			return x
		}
	}
	t.Fatalf("%s %q not listed", what, id)
	var zero T
	return zero
}

func ids(ts []*norn.Task) []string {
	out := make([]string, len(ts))
	for i, tk := range ts {
		out[i] = tk.ID
	}
	return out
}

func sortedIDs(ts []*norn.Task) []string {
	out := ids(ts)
	sort.Strings(out)
	return out
}

func eqStrings(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d items, want %d\ngot  %v\nwant %v", what, len(got), len(want), clip(got), clip(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: item %d is %q, want %q\ngot  %v\nwant %v", what, i, got[i], want[i], clip(got), clip(want))
		}
	}
}

func clip(s []string) []string {
	if len(s) > 20 {
		return append(s[:20:20], fmt.Sprintf("... (%d more)", len(s)-20))
	}
	return s
}

// title upper-cases the first letter, to build subtest names from statuses.
func title(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

func ptr[T any](v T) *T { return &v }

func dur(d time.Duration) norn.Duration { return norn.Duration(d) }

// noRetry is the policy of a task that must not be retried: without one,
// a task follows norn.DefaultRetry.
var noRetry = &norn.RetryPolicy{}
