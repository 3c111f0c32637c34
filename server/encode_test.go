package server

import (
	"encoding/json"
	"math"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// TestAppendTaskMatchesMarshal: the hand-written task encoder writes the
// bytes json.Marshal writes, for every field, omitted zero values and
// strings that need escaping.
func TestAppendTaskMatchesMarshal(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)
	full := &norn.Task{ID: "id<1>&\"é\u2028", Queue: "q", Spec: json.RawMessage(`{"a":[1,"x"]}`), Priority: math.MaxUint32,
		Status: norn.StatusRunning, Progress: 0.25, Labels: map[string]string{"b": "1", "a": "<2>"}, Created: now,
		Updated: now.Add(time.Second), RunAt: now, DependsOn: []string{"a", "b\\"}, Owner: "w", Deadline: now.Add(time.Minute),
		Lease: math.MaxUint64, Attempts: 3, MaxAttempts: 5, Retry: &norn.RetryPolicy{MaxRetries: 2, Base: norn.Duration(time.Second)},
		Timeout: norn.Duration(90 * time.Second), Result: json.RawMessage(`"ok"`),
		Errors:         []norn.ErrorInfo{{Code: "x", Description: "d", Args: map[string]any{"n": 1.5}}},
		History:        []norn.HistoryEntry{{Type: norn.TaskComplete, Time: now, Worker: "w", Lease: 2, Progress: 1}},
		HistoryDropped: 4, Version: 9}
	for _, tk := range []*norn.Task{nil, {}, full, {ID: "a", Progress: 1e-7}, {ID: string([]byte{0xff}), Progress: 1e22},
		{ID: "a", Progress: 1, Created: time.Date(2030, 1, 1, 0, 0, 0, 0, time.FixedZone("x", 3600))}} {
		got, err := appendTask(nil, tk)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(tk)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("appendTask:\n%s\njson.Marshal:\n%s", got, want)
		}
	}
	if _, err := appendTask(nil, &norn.Task{Progress: math.NaN()}); err == nil {
		t.Error("NaN progress encoded")
	}
	if _, err := appendTask(nil, &norn.Task{Created: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Error("year 10000 encoded")
	}
}

// TestWriteTasks: the batch and claim bodies decode to what writeJSON of
// the response structs gives.
func TestWriteTasks(t *testing.T) {
	t.Parallel()
	tasks := []*norn.Task{{ID: "a", Queue: "q", Spec: json.RawMessage(`[1]`)}, {ID: "b", Queue: "q"}}
	for _, dups := range [][]string{nil, {}, {"b", "<c>"}} {
		rec := httptest.NewRecorder()
		writeTasks(rec, 200, tasks, dups)
		ref := httptest.NewRecorder()
		if dups == nil {
			writeJSON(ref, 200, tasksResponse{Tasks: tasks})
		} else {
			writeJSON(ref, 200, batchResponse{Tasks: tasks, Duplicates: dups})
		}
		if rec.Body.String() != ref.Body.String() || !reflect.DeepEqual(rec.Header(), ref.Header()) || rec.Code != ref.Code {
			t.Errorf("dups %v: writeTasks %d %v %q, writeJSON %d %v %q", dups, rec.Code, rec.Header(), rec.Body, ref.Code, ref.Header(), ref.Body)
		}
	}
	rec := httptest.NewRecorder()
	writeTasks(rec, 200, []*norn.Task{{Progress: math.Inf(1)}}, nil)
	if rec.Code != 500 {
		t.Errorf("unencodable task: status %d, want 500", rec.Code)
	}
}

// TestWriteLeaseResults: the lease batch body is byte for byte writeJSON's.
func TestWriteLeaseResults(t *testing.T) {
	t.Parallel()
	d := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, rs := range [][]leaseResult{{}, {{}, {Deadline: d}, {Error: &wireError{Code: norn.CodeLeaseLost, Message: "lost <x>"}}},
		{{Deadline: d, Error: &wireError{Code: norn.CodeInvalidArgument, Message: "m", Field: "ops[1].id"}}}} {
		rec, ref := httptest.NewRecorder(), httptest.NewRecorder()
		writeLeaseResults(rec, rs)
		writeJSON(ref, 200, leaseBatchResponse{Results: rs})
		if rec.Body.String() != ref.Body.String() || rec.Code != ref.Code || !reflect.DeepEqual(rec.Header(), ref.Header()) {
			t.Errorf("writeLeaseResults %d %q, writeJSON %d %q", rec.Code, rec.Body, ref.Code, ref.Body)
		}
	}
}
