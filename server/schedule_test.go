package server

import (
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// TestScheduleScope: a queue-scoped token sees and changes only the
// schedules of its queues; the others look like schedules that do not exist.
func TestScheduleScope(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) {
		c.Tokens = []Token{{Token: "admin", Role: RoleAdmin}, {Token: "admin-a", Role: RoleAdmin, Queues: []string{"a"}}}
	})
	admin, scoped := withToken("admin"), withToken("admin-a")
	e.must(200, "PUT", "/v1/schedules/sa", `{"queue":"a","cron":"@hourly"}`, admin)
	e.must(200, "PUT", "/v1/schedules/sb", `{"queue":"b","cron":"@hourly","spec":{"secret":1}}`, admin)

	var list wire.SchedulesResponse
	e.must(200, "GET", "/v1/schedules", "", scoped).decode(t, &list)
	if len(list.Schedules) != 1 || list.Schedules[0].Name != "sa" {
		t.Fatalf("scoped list: %+v", list.Schedules)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/schedules/sb", ""},
		{"PATCH", "/v1/schedules/sb", `{"paused":true}`},
		{"DELETE", "/v1/schedules/sb", ""},
		{"POST", "/v1/schedules/sb/trigger", ""},
		{"GET", "/v1/schedules/missing", ""},
	} {
		r := e.must(404, c.method, c.path, c.body, scoped)
		if code, _ := r.errorOf(t); code != norn.CodeNotFound {
			t.Errorf("%s %s: code %s, want not_found", c.method, c.path, code)
		}
	}
	// Taking over another queue's schedule by name, or moving one's own
	// schedule into another queue, is refused.
	e.must(409, "PUT", "/v1/schedules/sb", `{"queue":"a","cron":"@hourly"}`, scoped)
	e.must(403, "PATCH", "/v1/schedules/sa", `{"queue":"b"}`, scoped)
	e.must(403, "PUT", "/v1/schedules/sc", `{"queue":"b","cron":"@hourly"}`, scoped)
	var one wire.ScheduleResponse
	e.must(200, "GET", "/v1/schedules/sb", "", admin).decode(t, &one)
	if one.Schedule.Paused || one.Schedule.Queue != "b" {
		t.Fatalf("scoped calls changed sb: %+v", one.Schedule)
	}
}

func TestScheduleRoutes(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	// The name in the body, if given, must match the path.
	e.must(400, "PUT", "/v1/schedules/x", `{"name":"y","queue":"q","cron":"@hourly"}`)
	e.must(400, "PUT", "/v1/schedules/x", `{"queue":"q","cron":"@hourly","bogus":1}`)
	r := e.must(400, "PUT", "/v1/schedules/x", `{"queue":"q","cron":"61 * * * *"}`)
	if _, field := r.errorOf(t); field != "cron" {
		t.Fatalf("bad cron names %q", field)
	}
	var one wire.ScheduleResponse
	e.must(200, "PUT", "/v1/schedules/x", `{"queue":"q","cron":"@every 30s","timezone":"Europe/Berlin","labels":{"team":"a"}}`).decode(t, &one)
	if one.Schedule.Name != "x" || one.Schedule.NextFire.IsZero() || one.Schedule.CatchUp != norn.CatchUpOne {
		t.Fatalf("put: %+v", one.Schedule)
	}
	e.must(200, "PATCH", "/v1/schedules/x", `{"paused":true}`).decode(t, &one)
	if !one.Schedule.Paused {
		t.Fatal("patch did not pause")
	}
	var sub wire.TaskResponse
	e.must(200, "POST", "/v1/schedules/x/trigger", "").decode(t, &sub)
	if sub.Task == nil || sub.Task.Labels[norn.ScheduleLabel] != "x" || sub.Task.Labels["team"] != "a" {
		t.Fatalf("trigger: %+v", sub.Task)
	}
	e.must(200, "DELETE", "/v1/schedules/x", "")
	e.must(404, "GET", "/v1/schedules/x", "")
}
