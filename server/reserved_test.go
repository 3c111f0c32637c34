package server

import (
	"net/url"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/bridge/kafka"
	"github.com/nornq/norn/internal/wire"
)

// TestReservedIDsRefused: the ids Norn's own producers derive (a schedule's
// tick, a Kafka bridge message) cannot be taken over HTTP, by any token. Before,
// a client scoped to qa submitted schedule:<name>:<tick> for the coming
// ticks of a qb schedule into qa, and each tick was skipped with "id … is
// already taken".
func TestReservedIDsRefused(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.Tokens = []Token{{Token: "admin", Role: RoleAdmin}, {Token: "cqa", Role: RoleClient, Queues: []string{"qa"}}}
	})
	admin, cqa := withToken("admin"), withToken("cqa")
	var sc wire.ScheduleResponse
	e.must(200, "PUT", "/v1/schedules/report", `{"queue":"qb","cron":"@every 1s"}`, admin).decode(t, &sc)
	var ticks []string
	for i := range 5 {
		ticks = append(ticks, norn.ScheduleTaskID("report", sc.Schedule.NextFire.Add(time.Duration(i)*time.Second)))
	}
	bridge := kafka.TaskID("norn.kafka-delay", "order-42")
	for _, c := range []struct {
		tok        reqOpt
		path, body string
		field      string
	}{
		{cqa, "/v1/tasks", `{"id":"` + ticks[0] + `","queue":"qa"}`, "id"},
		{cqa, "/v1/tasks/batch", `{"tasks":[{"id":"mine","queue":"qa"},{"id":"` + ticks[1] + `","queue":"qa"}]}`, "tasks[1].id"},
		{cqa, "/v1/transactions", `{"submit":[{"id":"` + ticks[2] + `","queue":"qa"}]}`, "submit[0].id"},
		{admin, "/v1/tasks", `{"id":"` + ticks[3] + `","queue":"qb"}`, "id"},
		{cqa, "/v1/tasks", `{"id":"` + bridge + `","queue":"qa"}`, "id"},
		{admin, "/v1/tasks", `{"id":"norn:anything","queue":"qa"}`, "id"},
	} {
		r := e.do("POST", c.path, c.body, c.tok)
		if code, field := r.errorOf(t); r.status != 400 || code != norn.CodeInvalidArgument || field != c.field {
			t.Errorf("POST %s %s: %d %s, want 400 naming %s", c.path, c.body, r.status, r.body, c.field)
		}
	}
	// The schedule's own ticks may fire into qb meanwhile (one a second);
	// none of the refused submissions may have written anything.
	if n := e.count(norn.Filter{Queues: []string{"qa"}}); n != 0 {
		t.Fatalf("%d tasks in qa after refused submissions", n)
	}
	e.must(404, "GET", "/v1/tasks/"+ticks[3], "", admin)
	// Ids that merely look alike stay the callers'.
	for _, id := range []string{"~home", "schedule-report", "Norn:x", "a:schedule:b"} {
		e.must(201, "POST", "/v1/tasks", `{"id":"`+id+`","queue":"qa"}`, cqa)
	}
	// The schedule fires its ticks into qb as before.
	waitFor(t, func() bool {
		var tr wire.TaskResponse
		r := e.do("GET", "/v1/tasks/"+url.PathEscape(ticks[1]), "", admin)
		if r.status != 200 {
			return false
		}
		r.decode(t, &tr)
		return tr.Task.Queue == "qb"
	})
}
