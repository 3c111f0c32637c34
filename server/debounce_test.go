package server

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// TestDebounceOverTime: over HTTP and with the real clock, a task
// submitted with delay 2s and replaced after 1s (with delay 2s again) runs
// once, about 3 s after the first submit, with the second spec.
func TestDebounceOverTime(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	start := time.Now()
	var first wire.TaskResponse
	e.must(201, "POST", "/v1/tasks", `{"queue":"dq","unique_key":"k","on_duplicate":"replace","delay":"2s","spec":{"v":1}}`).decode(t, &first)
	time.Sleep(time.Second) // the scenario: a second event a second later
	var second wire.TaskResponse
	e.must(200, "POST", "/v1/tasks", `{"queue":"dq","unique_key":"k","on_duplicate":"replace","delay":"2s","spec":{"v":2}}`).decode(t, &second)
	if !second.Duplicate || !second.Replaced || second.Task.ID != first.Task.ID {
		t.Fatalf("replace answered %+v, want the first task replaced", second)
	}
	var w struct {
		ID string `json:"id"`
	}
	e.must(201, "POST", "/v1/workers", `{"name":"w","queues":["dq"]}`).decode(t, &w)
	var got wire.TasksResponse
	e.must(200, "POST", "/v1/claim", `{"worker":"`+w.ID+`","queues":["dq"],"n":5,"wait":"10s"}`).decode(t, &got)
	ran := time.Since(start)
	if len(got.Tasks) != 1 || got.Tasks[0].ID != first.Task.ID {
		t.Fatalf("claimed %+v, want only the replaced task", got.Tasks)
	}
	var spec struct{ V int }
	if err := json.Unmarshal(got.Tasks[0].Spec, &spec); err != nil || spec.V != 2 {
		t.Fatalf("claimed spec %s, want the second", got.Tasks[0].Spec)
	}
	if ran < 2900*time.Millisecond || ran > 4500*time.Millisecond {
		t.Fatalf("the task ran %v after the first submit, want about 3s", ran)
	}
	if n, err := e.store.Count(t.Context(), norn.Filter{Queues: []string{"dq"}}); err != nil || n != 1 {
		t.Fatalf("%d tasks in the queue (%v), want 1", n, err)
	}
}
