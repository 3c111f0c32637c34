package wire

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// TestAppendBatchMatchesMarshal: the hand-written batch encoder produces
// the document json.Marshal produces, for every field and awkward strings.
func TestAppendBatchMatchesMarshal(t *testing.T) {
	t.Parallel()
	two := 2
	zero := 0
	tasks := []norn.NewTask{
		{Queue: "q"},
		{ID: "id-1", Queue: "emails", Spec: json.RawMessage(`{"to":"a@b.c","n":[1,2]}`), Priority: 7},
		{ID: "é\"<x>&\\\n\x01", Queue: "q\u2028", Spec: json.RawMessage(` "s" `), Labels: map[string]string{"b": "2", "a": "<1>"}},
		{Queue: "q", RunAt: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC), Delay: norn.Duration(1500 * time.Millisecond),
			DependsOn: []string{"a", "b\"c"}, MaxAttempts: &two, Retry: &norn.RetryPolicy{MaxRetries: 3, Base: norn.Duration(time.Second)},
			Timeout: norn.Duration(time.Minute), UniqueKey: "k\"1", UniqueFor: norn.Duration(time.Hour)},
		{Queue: "q", MaxAttempts: &zero, Spec: json.RawMessage(`null`), Priority: 1<<32 - 1},
		{Queue: "q", ID: string([]byte{0xff, 'a'})},
	}
	got, err := AppendBatch(nil, tasks)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(map[string]any{"tasks": tasks})
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("AppendBatch wrote invalid JSON %s: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("AppendBatch:\n%s\njson.Marshal:\n%s", got, want)
	}
	// Apart from the verbatim spec whitespace, the bytes are identical.
	tasks[2].Spec = json.RawMessage(`"s"`)
	got, _ = AppendBatch(nil, tasks)
	want, _ = json.Marshal(map[string]any{"tasks": tasks})
	if string(got) != string(want) {
		t.Errorf("bytes differ:\n%s\n%s", got, want)
	}
}

// TestAppendLeaseOpsMatchesMarshal: the lease batch body is byte for byte
// json.Marshal's.
func TestAppendLeaseOpsMatchesMarshal(t *testing.T) {
	t.Parallel()
	p := 0.5
	small := 1e-9
	ops := []norn.LeaseOp{
		{Op: norn.OpComplete, LeaseRef: norn.LeaseRef{TaskID: "t1", Worker: "w", Lease: 1<<64 - 1}, Result: json.RawMessage(`{"ok":true}`)},
		{Op: norn.OpHeartbeat, LeaseRef: norn.LeaseRef{TaskID: "t<2>", Worker: "wé", Lease: 2}, Heartbeat: norn.Heartbeat{Progress: &p, Extend: norn.Duration(time.Minute)}},
		{Op: norn.OpHeartbeat, Heartbeat: norn.Heartbeat{Progress: &small}},
		{Op: norn.OpFail, Error: &norn.ErrorInfo{Code: "x", Description: "\"d\"", Args: map[string]any{"a": []any{1.0, "b"}}}},
		{Op: norn.OpYield},
	}
	got, err := AppendLeaseOps(nil, ops)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(map[string]any{"ops": ops})
	if string(got) != string(want) {
		t.Errorf("AppendLeaseOps:\n%s\njson.Marshal:\n%s", got, want)
	}
}
