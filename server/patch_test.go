package server

import (
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// TestPatchChangesOnlyWhatItNames: a PATCH of a queue or a schedule keeps
// every member of a nested setting that it does not name. Before,
// {"retention":{"completed":"1h"}} set aborted and cancelled to 0s (keep
// forever), and a partial retry, rate limit or key setting zeroed the rest.
func TestPatchChangesOnlyWhatItNames(t *testing.T) {
	t.Parallel()
	e := startServer(t, nil)
	queue := func(body string) norn.QueueInfo {
		t.Helper()
		var qr wire.QueueResponse
		e.must(200, "PATCH", "/v1/queues/q", body).decode(t, &qr)
		var again wire.QueueResponse
		e.must(200, "GET", "/v1/queues/q", "").decode(t, &again)
		return again.Queue
	}
	h := func(n int) norn.Duration { return norn.Duration(time.Duration(n) * time.Hour) }

	q := queue(`{"retention":{"completed":"1h"}}`)
	if r := q.Defaults.Retention; r.Completed != h(1) || r.Aborted != norn.DefaultRetention.Aborted || r.Cancelled != norn.DefaultRetention.Cancelled {
		t.Errorf("retention after naming completed only: %+v", r)
	}
	q = queue(`{"retention":{"cancelled":"2h","aborted":null}}`)
	if r := q.Defaults.Retention; r.Completed != h(1) || r.Aborted != norn.DefaultRetention.Aborted || r.Cancelled != h(2) {
		t.Errorf("retention after naming cancelled: %+v", r)
	}

	queue(`{"retry":{"max_retries":3,"base":"2s","max":"1m"}}`)
	q = queue(`{"retry":{"base":"5s"}}`)
	if r := q.Defaults.Retry; r == nil || r.MaxRetries != 3 || r.Base != norn.Duration(5*time.Second) || r.Max != norn.Duration(time.Minute) {
		t.Errorf("retry after naming base only: %+v", r)
	}
	if q = queue(`{"retry":{"max_retries":0}}`); q.Defaults.Retry == nil || *q.Defaults.Retry != (norn.RetryPolicy{}) {
		t.Errorf("retry after max_retries 0: %+v, want a policy of no retries", q.Defaults.Retry)
	}

	queue(`{"rate_limit":{"per_second":10,"burst":5}}`)
	if q = queue(`{"rate_limit":{"burst":7}}`); q.RateLimit != (norn.RateLimit{PerSecond: 10, Burst: 7}) {
		t.Errorf("rate limit after naming burst only: %+v", q.RateLimit)
	}
	if q = queue(`{"rate_limit":{"per_second":20}}`); q.RateLimit != (norn.RateLimit{PerSecond: 20, Burst: 7}) {
		t.Errorf("rate limit after naming per_second only: %+v", q.RateLimit)
	}
	if q = queue(`{"rate_limit":{"per_second":0}}`); !q.RateLimit.IsZero() {
		t.Errorf("rate limit after per_second 0: %+v, want none", q.RateLimit)
	}

	e.must(200, "PUT", "/v1/queues/q/keys/acme", `{"limit":2,"weight":3}`)
	q = queue(`{"keys":{"acme":{"weight":5},"globex":{"limit":1}}}`)
	var acme, globex norn.KeyInfo
	for _, k := range q.Keys {
		switch k.Key {
		case "acme":
			acme = k
		case "globex":
			globex = k
		}
	}
	if acme.Limit != 2 || acme.Weight != 5 || globex.Limit != 1 || globex.Weight != 0 {
		t.Errorf("keys after naming acme's weight and globex's limit: %+v", q.Keys)
	}
	if q = queue(`{"keys":{"acme":null,"globex":null}}`); len(q.Keys) != 0 {
		t.Errorf("keys after removing both: %+v", q.Keys)
	}
	// What the patches left alone is still there.
	if q.Defaults.Retention.Completed != h(1) || q.Defaults.Timeout != norn.Duration(norn.DefaultTimeout) {
		t.Errorf("queue after the patches: %+v", q.Defaults)
	}

	e.must(200, "PUT", "/v1/schedules/s", `{"queue":"q","cron":"@hourly","retry":{"max_retries":3,"base":"2s","max":"1m"}}`)
	var sr wire.ScheduleResponse
	e.must(200, "PATCH", "/v1/schedules/s", `{"retry":{"max":"2m"}}`).decode(t, &sr)
	if r := sr.Schedule.Retry; r == nil || r.MaxRetries != 3 || r.Base != norn.Duration(2*time.Second) || r.Max != norn.Duration(2*time.Minute) {
		t.Errorf("schedule retry after naming max only: %+v", r)
	}
	// Errors still name the member.
	r := e.do("PATCH", "/v1/queues/q", `{"retention":{"aborted":"soon"}}`)
	if code, field := r.errorOf(t); r.status != 400 || code != norn.CodeInvalidArgument || field != "retention.aborted" {
		t.Errorf("bad retention member: %d %s", r.status, r.body)
	}
	r = e.do("PATCH", "/v1/schedules/s", `{"retry":{"base":"-1s"}}`)
	if code, _ := r.errorOf(t); r.status != 400 || code != norn.CodeInvalidArgument {
		t.Errorf("bad schedule retry member: %d %s", r.status, r.body)
	}
	r = e.do("PATCH", "/v1/queues/q", `{"retry":{"max_retries":1,"basis":"1s"}}`)
	if code, field := r.errorOf(t); r.status != 400 || code != norn.CodeInvalidArgument || field != "retry.basis" {
		t.Errorf("unknown retry member: %d %s", r.status, r.body)
	}
}
