package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// env is one subtest's store, clock and context.
type env struct {
	t     *testing.T
	s     norn.Store
	clock *FakeClock
	ctx   context.Context
}

func newEnv(t *testing.T, f Factory) *env {
	t.Helper()
	clock := NewFakeClock()
	s := f(t, clock)
	return &env{t: t, s: s, clock: clock, ctx: t.Context()}
}

func (e *env) now() time.Time { return e.clock.Now() }

// submit stores new tasks and fails the test on any error or duplicate.
func (e *env) submit(nts ...norn.NewTask) []*norn.Task {
	e.t.Helper()
	res, err := e.s.Submit(e.ctx, nts...)
	if err != nil {
		e.t.Fatalf("Submit: %v", err)
	}
	if len(res) != len(nts) {
		e.t.Fatalf("Submit returned %d results for %d tasks", len(res), len(nts))
	}
	out := make([]*norn.Task, len(res))
	for i, r := range res {
		if r.Duplicate {
			e.t.Fatalf("Submit: task %d (%q) unexpectedly reported as duplicate", i, r.Task.ID)
		}
		if r.Task == nil {
			e.t.Fatalf("Submit: result %d has no task", i)
		}
		out[i] = r.Task
	}
	return out
}

func (e *env) submitOne(nt norn.NewTask) *norn.Task {
	e.t.Helper()
	return e.submit(nt)[0]
}

// submitMany submits tasks in batches of 1000.
func (e *env) submitMany(nts []norn.NewTask) {
	e.t.Helper()
	for len(nts) > 0 {
		n := min(1000, len(nts))
		e.submit(nts[:n]...)
		nts = nts[n:]
	}
}

func (e *env) get(id string) *norn.Task {
	e.t.Helper()
	tk, err := e.s.Get(e.ctx, id)
	if err != nil {
		e.t.Fatalf("Get(%q): %v", id, err)
	}
	return tk
}

// gone asserts that a task no longer exists.
func (e *env) gone(id string) {
	e.t.Helper()
	_, err := e.s.Get(e.ctx, id)
	if !errors.Is(err, norn.ErrNotFound) {
		e.t.Fatalf("Get(%q) after removal: err = %v, want not_found", id, err)
	}
}

// status asserts a task's status and returns the task.
func (e *env) status(id string, want norn.Status) *norn.Task {
	e.t.Helper()
	tk := e.get(id)
	if tk.Status != want {
		e.t.Fatalf("task %q: status %s, want %s (history %s)", id, tk.Status, want, historyTypes(tk))
	}
	return tk
}

func (e *env) claimReq(req norn.ClaimRequest) []*norn.Task {
	e.t.Helper()
	ts, err := e.s.Claim(e.ctx, req)
	if err != nil {
		e.t.Fatalf("Claim(%+v): %v", req, err)
	}
	for _, tk := range ts {
		if tk.Status != norn.StatusRunning || tk.Owner != req.Worker {
			e.t.Fatalf("Claim returned task %q with status %s owner %q, want running owned by %q",
				tk.ID, tk.Status, tk.Owner, req.Worker)
		}
	}
	return ts
}

// claim claims exactly one task from queues.
func (e *env) claim(worker string, queues ...string) *norn.Task {
	e.t.Helper()
	ts := e.claimReq(norn.ClaimRequest{Worker: worker, Queues: queues, N: 1})
	if len(ts) != 1 {
		e.t.Fatalf("Claim(%s, %v): got %d tasks, want 1", worker, queues, len(ts))
	}
	return ts[0]
}

// claimNone asserts that nothing is claimable from queues.
func (e *env) claimNone(queues ...string) {
	e.t.Helper()
	ts := e.claimReq(norn.ClaimRequest{Worker: "probe", Queues: queues, N: 10})
	if len(ts) != 0 {
		e.t.Fatalf("Claim(%v): got %d tasks (first %q, %s), want none", queues, len(ts), ts[0].ID, ts[0].Status)
	}
}

func (e *env) sweep() {
	e.t.Helper()
	if _, err := e.s.Sweep(e.ctx); err != nil {
		e.t.Fatalf("Sweep: %v", err)
	}
}

// advance moves the fake clock and runs the monitor, so everything due by
// then has happened (whether Sweep or the store's own monitor did it).
func (e *env) advance(d time.Duration) {
	e.t.Helper()
	e.clock.Advance(d)
	e.sweep()
}

func (e *env) complete(tk *norn.Task, result string) {
	e.t.Helper()
	var raw json.RawMessage
	if result != "" {
		raw = json.RawMessage(result)
	}
	if err := e.s.Complete(e.ctx, ref(tk), raw); err != nil {
		e.t.Fatalf("Complete(%q): %v", tk.ID, err)
	}
}

// snapshot returns every task in the store as canonical JSON keyed by id.
func (e *env) snapshot() map[string]string {
	e.t.Helper()
	it, err := e.s.Stream(e.ctx, norn.Query{})
	if err != nil {
		e.t.Fatalf("Stream: %v", err)
	}
	defer it.Close()
	out := map[string]string{}
	for it.Next() {
		tk := it.Item()
		out[tk.ID] = canonTask(tk)
	}
	if err := it.Err(); err != nil {
		e.t.Fatalf("Stream: %v", err)
	}
	return out
}

// unchanged asserts the store holds exactly the snapshot before.
func (e *env) unchanged(what string, before map[string]string) {
	e.t.Helper()
	after := e.snapshot()
	for id, b := range before {
		a, ok := after[id]
		if !ok {
			e.t.Errorf("%s: task %q disappeared", what, id)
		} else if a != b {
			e.t.Errorf("%s: task %q changed:\nbefore %s\nafter  %s", what, id, b, a)
		}
	}
	for id, a := range after {
		if _, ok := before[id]; !ok {
			e.t.Errorf("%s: task %q appeared: %s", what, id, a)
		}
	}
	if e.t.Failed() {
		e.t.FailNow()
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
func (e *env) listAll(q norn.Query) []*norn.Task {
	e.t.Helper()
	var out []*norn.Task
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		if pages > 100000 {
			e.t.Fatalf("List: cursor never ends")
		}
		p, err := e.s.List(e.ctx, q)
		if err != nil {
			e.t.Fatalf("List(%+v): %v", q, err)
		}
		if q.Limit > 0 && len(p.Tasks) > q.Limit {
			e.t.Fatalf("List: page of %d tasks with limit %d", len(p.Tasks), q.Limit)
		}
		for _, tk := range p.Tasks {
			if seen[tk.ID] {
				e.t.Fatalf("List: task %q returned twice across pages", tk.ID)
			}
			seen[tk.ID] = true
			out = append(out, tk)
		}
		if p.NextCursor == "" {
			return out
		}
		if len(p.Tasks) == 0 {
			e.t.Fatalf("List: empty page with a next cursor")
		}
		q.Cursor = p.NextCursor
	}
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

func ptr[T any](v T) *T { return &v }

func dur(d time.Duration) norn.Duration { return norn.Duration(d) }
