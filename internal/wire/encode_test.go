package wire

import (
	"encoding/json"
	"math"
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
		got, err := AppendTask(nil, tk)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(tk)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("AppendTask:\n%s\njson.Marshal:\n%s", got, want)
		}
	}
	if _, err := AppendTask(nil, &norn.Task{Progress: math.NaN()}); err == nil {
		t.Error("NaN progress encoded")
	}
	if _, err := AppendTask(nil, &norn.Task{Created: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}); err == nil {
		t.Error("year 10000 encoded")
	}
}

// TestAppendTasksBody: the batch and claim bodies are byte for byte
// json.Marshal's of BatchResponse and TasksResponse (plus the newline).
func TestAppendTasksBody(t *testing.T) {
	t.Parallel()
	tasks := []*norn.Task{{ID: "a", Queue: "q", Spec: json.RawMessage(`[1]`)}, {ID: "b", Queue: "q"}}
	for _, dups := range [][]string{nil, {}, {"b", "<c>"}} {
		got, err := AppendTasksBody(nil, tasks, dups)
		if err != nil {
			t.Fatal(err)
		}
		var want []byte
		if dups == nil {
			want, _ = json.Marshal(TasksResponse{Tasks: tasks})
		} else {
			want, _ = json.Marshal(BatchResponse{Tasks: tasks, Duplicates: dups})
		}
		if string(got) != string(want)+"\n" {
			t.Errorf("dups %v: AppendTasksBody %s, json.Marshal %s", dups, got, want)
		}
	}
	if _, err := AppendTasksBody(nil, []*norn.Task{{Progress: math.Inf(1)}}, nil); err == nil {
		t.Error("unencodable task encoded")
	}
}

// TestAppendLeaseResults: the lease batch body is byte for byte json.Marshal's.
func TestAppendLeaseResults(t *testing.T) {
	t.Parallel()
	d := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, rs := range [][]LeaseResult{{}, {{}, {Deadline: d}, {Error: &Error{Code: norn.CodeLeaseLost, Message: "lost <x>"}}},
		{{Deadline: d, Error: &Error{Code: norn.CodeInvalidArgument, Message: "m", Field: "ops[1].id"}}}} {
		got, err := AppendLeaseResults(nil, rs)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(LeaseBatchResponse{Results: rs})
		if string(got) != string(want)+"\n" {
			t.Errorf("AppendLeaseResults %s, json.Marshal %s", got, want)
		}
	}
}
