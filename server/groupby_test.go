package server

import (
	"slices"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// Both claim routes carry group_by to the store, and a bad one is a 400
// naming it.
func TestClaimGroupBy(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	e.must(200, "POST", "/v1/tasks/batch", `{"tasks":[{"id":"1","queue":"q","concurrency_key":"x"},`+
		`{"id":"2","queue":"q","concurrency_key":"y"},{"id":"3","queue":"q","concurrency_key":"x"},`+
		`{"id":"4","queue":"q","concurrency_key":"y"},{"id":"5","queue":"q","concurrency_key":"y"}]}`)
	var reg wire.RegisterResponse
	e.must(201, "POST", "/v1/workers", `{"name":"w","queues":["q"]}`).decode(t, &reg)
	claimed := func(path, body string) []string {
		t.Helper()
		var tr wire.TasksResponse
		e.must(200, "POST", path, body).decode(t, &tr)
		var got []string
		for _, tk := range tr.Tasks {
			got = append(got, tk.ID)
		}
		return got
	}
	w := `"worker":"` + reg.ID + `"`
	if got := claimed("/v1/queues/q/claim", `{`+w+`,"n":10,"min":3,"group_by":"concurrency_key"}`); !slices.Equal(got, []string{"2", "4", "5"}) {
		t.Errorf("per-queue claim answered %v, want y's [2 4 5]", got)
	}
	if got := claimed("/v1/claim", `{`+w+`,"queues":["q"],"n":10,"group_by":"concurrency_key"}`); !slices.Equal(got, []string{"1", "3"}) {
		t.Errorf("claim answered %v, want x's [1 3]", got)
	}
	for _, path := range []string{"/v1/claim", "/v1/queues/q/claim"} {
		r := e.do("POST", path, `{`+w+`,"queues":["q"],"group_by":"tenant"}`)
		if path == "/v1/queues/q/claim" {
			r = e.do("POST", path, `{`+w+`,"group_by":"tenant"}`)
		}
		if code, field := r.errorOf(t); r.status != 400 || code != norn.CodeInvalidArgument || field != "group_by" {
			t.Errorf("%s with group_by tenant: %d %s %s, want 400 naming group_by", path, r.status, code, field)
		}
	}
}
