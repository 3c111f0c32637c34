package server

import (
	"strings"
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// TestOutOfRangeRefusedOnEveryRoute: times outside what a store holds
// (before 1970, from 2200), durations over 100 years and counts over 32
// bits are 400 naming the field on every route that takes them, and
// change nothing. Before, DELETE /v1/tasks?queue=qa&created_after=2300-…
// deleted every task of qa (2300 wrapped to 1715), a run_at of 2300 was
// claimable at once, a heartbeat extend of 2562047h expired the lease at
// the next sweep and max_attempts 2147483648 became -2147483648.
func TestOutOfRangeRefusedOnEveryRoute(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	e.must(201, "POST", "/v1/tasks", `{"id":"a","queue":"qa"}`)
	e.must(201, "POST", "/v1/tasks", `{"id":"b","queue":"qa"}`)
	e.must(201, "POST", "/v1/tasks", `{"id":"run","queue":"r"}`)
	e.must(201, "POST", "/v1/tasks", `{"id":"ended","queue":"x"}`)
	e.must(200, "PUT", "/v1/schedules/s", `{"queue":"qa","cron":"@hourly"}`)
	var reg wire.RegisterResponse
	e.must(201, "POST", "/v1/workers", `{"name":"w","queues":["r","x"]}`).decode(t, &reg)
	w := reg.ID
	ended := e.claimOne("x", w)
	e.must(200, "POST", "/v1/tasks/ended/abort", `{"worker":"`+w+`","lease":`+itoa(ended.Lease)+`,"error":{"code":"no"}}`)
	run := e.claimOne("r", w)
	lease := `"worker":"` + w + `","lease":` + itoa(run.Lease)
	snapshot := func() string {
		return string(e.must(200, "GET", "/v1/tasks?limit=1000", "").body) +
			string(e.must(200, "GET", "/v1/queues", "").body) + string(e.must(200, "GET", "/v1/schedules", "").body)
	}
	before := snapshot()

	const late, early, huge, big = "2300-01-01T00:00:00Z", "1600-01-01T00:00:00Z", "2562047h", "2147483648"
	for _, c := range []struct{ method, path, body, field string }{
		{"DELETE", "/v1/tasks?queue=qa&created_after=" + late, "", "created_after"},
		{"DELETE", "/v1/tasks?queue=qa&created_before=" + early, "", "created_before"},
		{"DELETE", "/v1/tasks?queue=qa&updated_after=1970-01-01T00:00:00Z", "", "updated_after"},
		{"GET", "/v1/tasks?queue=qa&updated_before=" + late, "", "updated_before"},
		{"GET", "/v1/tasks/count?created_after=" + late, "", "created_after"},
		{"POST", "/v1/tasks/retry?queue=x&created_before=" + early, "", "created_before"},
		{"GET", "/v1/stats/throughput?since=" + late, "", "since"},
		{"GET", "/v1/tasks/run/log?after=18446744073709551615", "", "after"},
		{"POST", "/v1/tasks", `{"queue":"qa","run_at":"` + late + `"}`, "run_at"},
		{"POST", "/v1/tasks", `{"queue":"qa","run_at":"` + early + `"}`, "run_at"},
		{"POST", "/v1/tasks", `{"queue":"qa","delay":"` + huge + `"}`, "delay"},
		{"POST", "/v1/tasks", `{"queue":"qa","timeout":"` + huge + `"}`, "timeout"},
		{"POST", "/v1/tasks", `{"queue":"qa","max_runtime":"` + huge + `"}`, "max_runtime"},
		{"POST", "/v1/tasks", `{"queue":"qa","unique_key":"k","unique_for":"` + huge + `"}`, "unique_for"},
		{"POST", "/v1/tasks", `{"queue":"qa","max_attempts":` + big + `}`, "max_attempts"},
		{"POST", "/v1/tasks", `{"queue":"qa","retry":{"max_retries":` + big + `}}`, "retry.max_retries"},
		{"POST", "/v1/tasks", `{"queue":"qa","retry":{"max_retries":1,"base":"` + huge + `"}}`, "retry.base"},
		{"POST", "/v1/tasks/batch", `{"tasks":[{"queue":"qa"},{"queue":"qa","run_at":"` + late + `"}]}`, "tasks[1].run_at"},
		{"POST", "/v1/transactions", `{"submit":[{"queue":"qa","delay":"` + huge + `"}]}`, "submit[0].delay"},
		{"POST", "/v1/transactions", `{"update":[{"id":"a","run_at":"` + late + `"}]}`, "update[0].run_at"},
		{"POST", "/v1/transactions", `{"require":[{"id":"a","version":9223372036854775808}]}`, "require[0].version"},
		{"PATCH", "/v1/tasks/a", `{"run_at":"` + late + `"}`, "run_at"},
		{"PATCH", "/v1/tasks/a", `{"priority":1,"if_version":9223372036854775808}`, "if_version"},
		{"POST", "/v1/tasks/ended/retry", `{"run_at":"` + late + `"}`, "run_at"},
		{"POST", "/v1/queues/qa/claim", `{"worker":"` + w + `","timeout":"` + huge + `"}`, "timeout"},
		{"POST", "/v1/claim", `{"worker":"` + w + `","queues":["qa"],"timeout":"` + huge + `"}`, "timeout"},
		{"POST", "/v1/tasks/run/heartbeat", `{` + lease + `,"extend":"` + huge + `"}`, "extend"},
		{"POST", "/v1/tasks/run/heartbeat", `{"worker":"` + w + `","lease":9223372036854775808}`, "lease"},
		{"POST", "/v1/tasks/run/log", `{` + lease + `,"seq":9223372036854775808,"data":1}`, "seq"},
		{"POST", "/v1/tasks/run/snooze", `{` + lease + `,"delay":"` + huge + `"}`, "delay"},
		{"POST", "/v1/tasks/run/snooze", `{` + lease + `,"run_at":"` + late + `"}`, "run_at"},
		{"POST", "/v1/leases/batch", `{"ops":[{"op":"heartbeat","id":"run",` + lease + `,"extend":"` + huge + `"}]}`, "ops[0].extend"},
		{"POST", "/v1/leases/batch", `{"ops":[{"op":"snooze","id":"run",` + lease + `,"run_at":"` + early + `"}]}`, "ops[0].run_at"},
		{"PATCH", "/v1/queues/qa", `{"timeout":"` + huge + `"}`, "timeout"},
		{"PATCH", "/v1/queues/qa", `{"max_attempts":` + big + `}`, "max_attempts"},
		{"PATCH", "/v1/queues/qa", `{"max_runtime":"` + huge + `"}`, "max_runtime"},
		{"PATCH", "/v1/queues/qa", `{"retention":{"completed":"` + huge + `"}}`, "retention.completed"},
		{"PATCH", "/v1/queues/qa", `{"retry":{"max_retries":` + big + `}}`, "retry.max_retries"},
		{"PATCH", "/v1/queues/qa", `{"max_running":` + big + `}`, "max_running"},
		{"PATCH", "/v1/queues/qa", `{"key_limit":` + big + `}`, "key_limit"},
		{"PUT", "/v1/queues/qa/keys/k", `{"limit":` + big + `}`, "limit"},
		{"PUT", "/v1/schedules/t", `{"queue":"qa","cron":"@hourly","max_attempts":` + big + `}`, "max_attempts"},
		{"PUT", "/v1/schedules/t", `{"queue":"qa","cron":"@hourly","timeout":"` + huge + `"}`, "timeout"},
		{"PATCH", "/v1/schedules/s", `{"max_runtime":"` + huge + `"}`, "max_runtime"},
	} {
		r := e.do(c.method, c.path, c.body)
		code, field := r.errorOf(t)
		if r.status != 400 || code != norn.CodeInvalidArgument || field != c.field {
			t.Errorf("%s %s %s: %d %s, want 400 naming %s", c.method, c.path, c.body, r.status, r.body, c.field)
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("refused requests changed the store:\nbefore %s\nafter  %s", before, after)
	}
	// The lease is still the live one.
	e.must(200, "POST", "/v1/tasks/run/heartbeat", `{`+lease+`}`)
	if strings.Contains(before, "2300") {
		t.Fatal("the snapshot holds a time of 2300")
	}
}
