package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func TestDependencyOutcome(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   norn.DependencyResult
		want string
	}{
		{norn.DependencyResult{ID: "a", Status: "completed", Result: json.RawMessage(`{ "n": 1 }`)}, `completed {"n":1}`},
		{norn.DependencyResult{ID: "a", Status: "aborted", Error: &norn.ErrorInfo{Code: "boom", Description: "it broke"}}, "aborted: boom: it broke"},
		{norn.DependencyResult{ID: "a", Status: "deleted"}, "deleted"},
		{norn.DependencyResult{ID: "a", Status: "completed", Result: json.RawMessage(`"` + strings.Repeat("x", 100) + `"`)}, `completed "` + strings.Repeat("x", 79) + "…"},
	}
	for _, tc := range tests {
		if got := dependencyOutcome(tc.in); got != tc.want {
			t.Errorf("dependencyOutcome(%+v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestDescribeTaskWorkflow(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	task := &norn.Task{ID: "r", Queue: "q", Status: norn.StatusBlocked, DependsOn: []string{"a", "b", "kid"},
		DependencyResults: []norn.DependencyResult{{ID: "a", Status: "completed", Result: json.RawMessage(`1`)}, {ID: "b", Status: "cancelled"}},
		History:           []norn.HistoryEntry{{Type: norn.TaskAwait, Time: now, Worker: "w1", Lease: 1}}}
	tests := []struct {
		name string
		deps dependents
		want []string
	}{
		{"none", dependents{}, []string{"dependents:", "none"}},
		{"all shown", dependents{count: 2, ids: []string{"x", "y"}}, []string{"2 (x, y)"}},
		{"more than shown", dependents{count: 12, ids: []string{"x"}}, []string{"12 (x, …; norn list --depends-on r)"}},
	}
	for _, tc := range tests {
		var b bytes.Buffer
		describeTask(&b, task, tc.deps, now)
		out := b.String()
		for _, w := range append(tc.want, "on_dependency_failure:   abort", "2 of 3 ended", "completed 1", "cancelled",
			"TaskAwait by w1 lease 1 (waits for the children it submitted)") {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out)
			}
		}
	}
}
