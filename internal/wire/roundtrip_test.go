package wire

import (
	"bytes"
	"encoding/json"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// The round trip of every route: what the client writes, the server reads
// back to the same value; what the server writes, the client reads back to
// the same value. Domain values are filled field by field (see fill), so a
// member one side forgets to write or read fails here.

func filled[T any](t *testing.T) T {
	t.Helper()
	var v T
	fill(t, reflect.ValueOf(&v).Elem())
	return v
}

// request checks a JSON body the client encodes (body) decodes on the
// server (DecodeStrict, as ReadBody does) into want.
func request[T any](t *testing.T, body []byte, want T) {
	t.Helper()
	var got T
	if err := DecodeStrict(body, &got, ""); err != nil {
		t.Fatalf("server refuses the client's body %s: %v", body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("request body %s\n decoded %+v\n    want %+v", body, got, want)
	}
}

// marshalRequest is what client.send writes for a body value.
func marshalRequest(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// response checks a body the server writes (body) decodes on the client
// (encoding/json, as client.do does) into want.
func response[T any](t *testing.T, body []byte, want T) {
	t.Helper()
	var got T
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&got); err != nil {
		t.Fatalf("client cannot decode the server's body %s: %v", body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("response body %s\n decoded %+v\n    want %+v", body, got, want)
	}
}

// marshalResponse is what the server's writeJSON writes.
func marshalResponse(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// plainResponse round-trips a response written by writeJSON.
func plainResponse[T any](t *testing.T, v T) {
	t.Helper()
	response(t, marshalResponse(t, v), v)
}

// queryString is how the client puts values on the URL and the server
// reads them back (strictly, as the server's middleware does).
func queryString(t *testing.T, v url.Values) url.Values {
	t.Helper()
	parsed, err := ParseRawQuery(v.Encode())
	if err != nil {
		t.Fatalf("server refuses the client's query %q: %v", v.Encode(), err)
	}
	return parsed
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	task := filled[norn.Task](t)
	tp := &task
	newTask := filled[norn.NewTask](t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)
	filter := norn.Filter{Queues: []string{"a", "b"}, Statuses: []norn.Status{norn.StatusReady, norn.StatusRunning},
		Labels: map[string]string{"k": "v:w", "tenant": "acme&co"}, Owner: "worker 1", IDContains: "0193+", DependsOn: "parent+1:x", UniqueKey: "user/42 &é", Batch: "b+1:x&é",
		CreatedAfter: at, CreatedBefore: at.Add(time.Hour), UpdatedAfter: at.Add(time.Nanosecond), UpdatedBefore: at.Add(time.Minute)}
	empty := marshalRequest(t, Empty{})

	routes := map[string]func(t *testing.T){
		"POST /v1/tasks": func(t *testing.T) {
			request(t, marshalRequest(t, newTask), newTask)
			plainResponse(t, TaskResponse{Task: tp, Duplicate: true})
		},
		"POST /v1/tasks/batch": func(t *testing.T) {
			body, err := AppendBatch(nil, []norn.NewTask{newTask, {Queue: "q"}})
			if err != nil {
				t.Fatal(err)
			}
			request(t, body, BatchRequest{Tasks: []norn.NewTask{newTask, {Queue: "q"}}})
			var streamed []norn.NewTask
			if err := DecodeBatch(bytes.NewReader(body), "tasks", 10, func(_ int, nt *norn.NewTask) error {
				streamed = append(streamed, *nt)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(streamed, []norn.NewTask{newTask, {Queue: "q"}}) {
				t.Fatalf("DecodeBatch read %+v", streamed)
			}
			out, err := AppendTasksBody(nil, []*norn.Task{tp, {ID: "b"}}, []string{"b"})
			if err != nil {
				t.Fatal(err)
			}
			response(t, out, BatchResponse{Tasks: []*norn.Task{tp, {ID: "b"}}, Duplicates: []string{"b"}})
		},
		"GET /v1/tasks/count": func(t *testing.T) {
			v := queryString(t, FilterValues(filter))
			if err := CheckParams(v, FilterParams, []string{"group"}); err != nil {
				t.Fatal(err)
			}
			f, err := ParseFilter(v, norn.MaxLabels)
			if err != nil || !reflect.DeepEqual(f, filter) {
				t.Fatalf("filter %+v, %v; want %+v", f, err, filter)
			}
			g, err := ParseGroup(queryString(t, GroupedFilterValues(filter)))
			if err != nil || !g {
				t.Fatalf("group = %v, %v", g, err)
			}
			plainResponse(t, CountResponse{Count: 42})
			plainResponse(t, GroupedCountResponse{Count: 3, Groups: []norn.GroupCount{{Queue: "a", Status: norn.StatusReady, Count: 3}}})
		},
		"GET /v1/tasks/{id}": func(t *testing.T) {
			ids := []string{"a:b", "ü-x", "c+d&e"}
			// The mux unescapes the path before the server splits it.
			seg, err := url.PathUnescape(strings.TrimPrefix(IDsPath(ids), "/v1/tasks/"))
			if err != nil {
				t.Fatal(err)
			}
			if got, err := SplitIDs(seg, 10); err != nil || !reflect.DeepEqual(got, ids) {
				t.Fatalf("SplitIDs = %q, %v", got, err)
			}
			plainResponse(t, TaskResponse{Task: tp})
			plainResponse(t, ManyResponse{Tasks: []*norn.Task{tp}, Missing: []string{"x"}})
		},
		"GET /v1/tasks": func(t *testing.T) {
			q := norn.Query{Filter: filter, Limit: 7, Cursor: "c/+=", Order: norn.OrderNewest, Summary: true}
			got, err := ParseQuery(queryString(t, QueryValues(q)), norn.MaxLabels, norn.MaxListLimit)
			if err != nil || !reflect.DeepEqual(got, q) {
				t.Fatalf("query %+v, %v; want %+v", got, err, q)
			}
			for _, o := range []norn.Order{norn.OrderID, norn.OrderPriority} {
				got, err := ParseQuery(queryString(t, QueryValues(norn.Query{Order: o})), norn.MaxLabels, norn.MaxListLimit)
				if err != nil || got.Order != o {
					t.Fatalf("order %q read back as %q, %v", o, got.Order, err)
				}
			}
			plainResponse(t, norn.Page{Tasks: []*norn.Task{tp}, NextCursor: "next"})
			// The NDJSON stream: task lines, then possibly an error line.
			response(t, marshalResponse(t, tp), StreamLine{Task: task})
			response(t, marshalResponse(t, ErrorBody{Error: &Error{Code: norn.CodeUnavailable, Message: "m"}}),
				StreamLine{Error: &Error{Code: norn.CodeUnavailable, Message: "m"}})
		},
		"DELETE /v1/tasks/{id}": func(t *testing.T) {
			plainResponse(t, DeletedResponse{Deleted: 1})
		},
		"DELETE /v1/tasks": func(t *testing.T) {
			v := queryString(t, FilterValues(filter))
			if err := CheckParams(v, FilterParams); err != nil {
				t.Fatal(err)
			}
			if f, err := ParseFilter(v, norn.MaxLabels); err != nil || !reflect.DeepEqual(f, filter) {
				t.Fatalf("filter %+v, %v", f, err)
			}
			plainResponse(t, DeletedResponse{Deleted: 12})
		},
		"PATCH /v1/tasks/{id}": func(t *testing.T) {
			u := filled[norn.Update](t)
			var w Update
			request(t, marshalRequest(t, FromUpdate(u)), FromUpdate(u))
			if err := DecodeStrict(marshalRequest(t, FromUpdate(u)), &w, ""); err != nil || !reflect.DeepEqual(w.Domain(), u) {
				t.Fatalf("update %+v, %v; want %+v", w.Domain(), err, u)
			}
			// An empty map clears the labels: it must arrive as one.
			clear := norn.Update{Labels: map[string]string{}}
			w = Update{}
			if err := DecodeStrict(marshalRequest(t, FromUpdate(clear)), &w, ""); err != nil || !reflect.DeepEqual(w.Domain(), clear) {
				t.Fatalf("clearing update %+v, %v", w.Domain(), err)
			}
			plainResponse(t, TaskResponse{Task: tp})
		},
		"POST /v1/tasks/{id}/cancel": func(t *testing.T) {
			request(t, empty, Empty{})
			plainResponse(t, TaskResponse{Task: tp})
		},
		"POST /v1/tasks/{id}/retry": func(t *testing.T) {
			req := filled[RetryRequest](t)
			request(t, marshalRequest(t, req), req)
			request(t, empty, RetryRequest{})
			plainResponse(t, TaskResponse{Task: tp})
		},
		"POST /v1/tasks/retry": func(t *testing.T) {
			v := queryString(t, FilterValues(filter))
			if err := CheckParams(v, FilterParams); err != nil {
				t.Fatal(err)
			}
			if f, err := ParseFilter(v, norn.MaxLabels); err != nil || !reflect.DeepEqual(f, filter) {
				t.Fatalf("filter %+v, %v", f, err)
			}
			plainResponse(t, RetriedResponse{Retried: 12})
		},
		"POST /v1/tasks/cancel": func(t *testing.T) {
			v := queryString(t, FilterValues(filter))
			if err := CheckParams(v, FilterParams); err != nil {
				t.Fatal(err)
			}
			if f, err := ParseFilter(v, norn.MaxLabels); err != nil || !reflect.DeepEqual(f, filter) {
				t.Fatalf("filter %+v, %v", f, err)
			}
			plainResponse(t, CancelledResponse{Cancelled: 12})
		},
		"GET /v1/tasks/{id}/log": func(t *testing.T) {
			after, limit, err := ParseLogParams(queryString(t, LogValues(9, 4)))
			if err != nil || after != 9 || limit != 4 {
				t.Fatalf("log params %d %d %v", after, limit, err)
			}
			plainResponse(t, LogResponse{Entries: []norn.LogEntry{filled[norn.LogEntry](t)}})
		},
		"POST /v1/transactions": func(t *testing.T) {
			tx := filled[norn.Txn](t)
			var w Txn
			if err := DecodeStrict(marshalRequest(t, FromTxn(tx)), &w, ""); err != nil || !reflect.DeepEqual(w.Domain(), tx) {
				t.Fatalf("txn %+v, %v; want %+v", w.Domain(), err, tx)
			}
			plainResponse(t, filled[norn.TxnResult](t))
		},
		"POST /v1/workers": func(t *testing.T) {
			// The registrar is the server's: it never travels.
			info := filled[norn.WorkerInfo](t)
			info.Registrar = ""
			request(t, marshalRequest(t, info), info)
			plainResponse(t, RegisterResponse{ID: "worker-1"})
		},
		"GET /v1/workers": func(t *testing.T) {
			info := filled[norn.WorkerInfo](t)
			info.Registrar = ""
			plainResponse(t, WorkersResponse{Workers: []norn.WorkerInfo{info}})
		},
		"GET /v1/whoami": func(t *testing.T) {
			plainResponse(t, WhoamiResponse{Role: "client", Queues: []string{"a"}, Auth: true})
		},
		"POST /v1/queues/{queue}/claim": func(t *testing.T) {
			req := filled[QueueClaimRequest](t)
			request(t, marshalRequest(t, req), req)
			out, err := AppendTasksBody(nil, []*norn.Task{tp}, nil)
			if err != nil {
				t.Fatal(err)
			}
			response(t, out, TasksResponse{Tasks: []*norn.Task{tp}})
		},
		"POST /v1/claim": func(t *testing.T) {
			req := filled[norn.ClaimRequest](t)
			request(t, marshalRequest(t, req), req)
			out, err := AppendTasksBody(nil, []*norn.Task{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			response(t, out, TasksResponse{Tasks: []*norn.Task{}})
		},
		"POST /v1/tasks/{id}/heartbeat": func(t *testing.T) {
			req := filled[HeartbeatRequest](t)
			request(t, marshalRequest(t, req), req)
			plainResponse(t, DeadlineResponse{Deadline: at})
		},
		"POST /v1/tasks/{id}/log": func(t *testing.T) {
			req := filled[AppendLogRequest](t)
			request(t, marshalRequest(t, req), req)
			plainResponse(t, EntryResponse{Entry: filled[norn.LogEntry](t)})
		},
		"POST /v1/tasks/{id}/complete": func(t *testing.T) {
			req := filled[CompleteRequest](t)
			request(t, marshalRequest(t, req), req)
			plainResponse(t, Empty{})
		},
		"POST /v1/tasks/{id}/fail": func(t *testing.T) {
			req := filled[FailRequest](t)
			request(t, marshalRequest(t, req), req)
			plainResponse(t, Empty{})
		},
		"POST /v1/tasks/{id}/abort": func(t *testing.T) {
			req := filled[FailRequest](t)
			request(t, marshalRequest(t, req), req)
			plainResponse(t, Empty{})
		},
		"POST /v1/tasks/{id}/yield": func(t *testing.T) {
			req := filled[YieldRequest](t)
			request(t, marshalRequest(t, req), req)
			plainResponse(t, Empty{})
		},
		"POST /v1/tasks/{id}/snooze": func(t *testing.T) {
			req := filled[SnoozeRequest](t)
			request(t, marshalRequest(t, req), req)
			plainResponse(t, TaskResponse{Task: tp})
		},
		"POST /v1/leases/batch": func(t *testing.T) {
			ops := []norn.LeaseOp{filled[norn.LeaseOp](t), {Op: norn.OpYield, LeaseRef: norn.LeaseRef{TaskID: "t", Worker: "w", Lease: 1}}}
			body, err := AppendLeaseOps(nil, ops)
			if err != nil {
				t.Fatal(err)
			}
			request(t, body, LeaseBatchRequest{Ops: ops})
			results := []LeaseResult{{Deadline: at}, {Error: &Error{Code: norn.CodeLeaseLost, Message: "gone", Field: "f"}}}
			out, err := AppendLeaseResults(nil, results)
			if err != nil {
				t.Fatal(err)
			}
			response(t, out, LeaseBatchResponse{Results: results})
		},
		"GET /v1/queues": func(t *testing.T) {
			plainResponse(t, QueuesResponse{Queues: []norn.QueueInfo{filled[norn.QueueInfo](t)}})
		},
		"GET /v1/queues/{queue}": func(t *testing.T) {
			plainResponse(t, QueueResponse{Queue: filled[norn.QueueInfo](t)})
		},
		"PATCH /v1/queues/{queue}": func(t *testing.T) {
			// The client names every nested member it carries, so the
			// server's patch completes nothing from the queue's settings.
			u := filled[norn.QueueUpdate](t)
			var p QueuePatch
			if err := DecodeStrict(marshalRequest(t, FromQueueUpdate(u)), &p, ""); err != nil {
				t.Fatal(err)
			}
			if got := p.Update(norn.QueueInfo{}); !reflect.DeepEqual(got, u) {
				t.Fatalf("queue update %+v, want %+v", got, u)
			}
			plainResponse(t, QueueResponse{Queue: filled[norn.QueueInfo](t)})
		},
		"GET /v1/queues/{queue}/keys/{key}": func(t *testing.T) {
			plainResponse(t, KeyResponse{Key: filled[norn.KeyInfo](t)})
		},
		"GET /v1/queues/{queue}/sequences": func(t *testing.T) {
			plainResponse(t, SequencesResponse{Sequences: []norn.SequenceInfo{filled[norn.SequenceInfo](t)}})
		},
		"GET /v1/queues/{queue}/sequences/{key}": func(t *testing.T) {
			plainResponse(t, SequenceResponse{Sequence: filled[norn.SequenceInfo](t)})
		},
		"PUT /v1/queues/{queue}/keys/{key}": func(t *testing.T) {
			ks := filled[norn.KeySettings](t)
			request(t, marshalRequest(t, ks), ks)
			plainResponse(t, KeyResponse{Key: filled[norn.KeyInfo](t)})
		},
		"DELETE /v1/queues/{queue}/keys/{key}": func(t *testing.T) {
			plainResponse(t, KeyResponse{Key: filled[norn.KeyInfo](t)})
		},
		"GET /v1/schedules": func(t *testing.T) {
			s := filled[norn.Schedule](t)
			plainResponse(t, SchedulesResponse{Schedules: []*norn.Schedule{&s}})
		},
		"GET /v1/schedules/{name}": func(t *testing.T) {
			s := filled[norn.Schedule](t)
			plainResponse(t, ScheduleResponse{Schedule: &s})
		},
		"PUT /v1/schedules/{name}": func(t *testing.T) {
			s := filled[norn.Schedule](t)
			request(t, marshalRequest(t, s), s)
			plainResponse(t, ScheduleResponse{Schedule: &s})
		},
		"PATCH /v1/schedules/{name}": func(t *testing.T) {
			u := filled[norn.ScheduleUpdate](t)
			var p SchedulePatch
			if err := DecodeStrict(marshalRequest(t, FromScheduleUpdate(u)), &p, ""); err != nil {
				t.Fatal(err)
			}
			if got := p.Update(&norn.Schedule{}); !reflect.DeepEqual(got, u) {
				t.Fatalf("schedule update %+v, want %+v", got, u)
			}
			s := filled[norn.Schedule](t)
			plainResponse(t, ScheduleResponse{Schedule: &s})
		},
		"DELETE /v1/schedules/{name}": func(t *testing.T) {
			plainResponse(t, Empty{})
		},
		"POST /v1/schedules/{name}/trigger": func(t *testing.T) {
			request(t, empty, Empty{})
			plainResponse(t, TaskResponse{Task: &norn.Task{ID: "schedule-task", Queue: "q", Status: norn.StatusReady, Labels: map[string]string{norn.ScheduleLabel: "s"}}})
		},
		"POST /v1/batches": func(t *testing.T) {
			nb := filled[norn.NewBatch](t)
			request(t, marshalRequest(t, nb), nb)
			plainResponse(t, filled[norn.BatchCreated](t))
		},
		"GET /v1/batches": func(t *testing.T) {
			q := norn.BatchQuery{State: norn.BatchSealed, Labels: map[string]string{"k": "v:w", "t": "a&b"}, After: "b 1/é", Limit: 7}
			got, err := ParseBatchQuery(queryString(t, BatchQueryValues(q)))
			if err != nil || !reflect.DeepEqual(got, q) {
				t.Fatalf("batch query %+v, %v; want %+v", got, err, q)
			}
			b := filled[norn.Batch](t)
			plainResponse(t, BatchesResponse{Batches: []*norn.Batch{&b}})
		},
		"GET /v1/batches/{id}": func(t *testing.T) {
			b := filled[norn.Batch](t)
			plainResponse(t, OneBatch{Batch: &b})
		},
		"POST /v1/batches/{id}/seal": func(t *testing.T) {
			request(t, empty, Empty{})
			b := filled[norn.Batch](t)
			plainResponse(t, OneBatch{Batch: &b})
		},
		"DELETE /v1/batches/{id}": func(t *testing.T) {
			plainResponse(t, BatchDeleted{Deleted: 3})
		},
		"POST /v1/tasks/{id}/await": func(t *testing.T) {
			req := AwaitRequest{LeaseOwner: LeaseOwner{Worker: "w", Lease: 3},
				AwaitRequest: norn.AwaitRequest{Tasks: []norn.NewTask{newTask}, OnChildFailure: norn.ChildFailureContinue}}
			request(t, marshalRequest(t, req), req)
			plainResponse(t, norn.AwaitResult{Task: tp, Children: []norn.Submitted{{Task: tp, Duplicate: true}}})
		},
		"POST /v1/tasks/{id}/signals": func(t *testing.T) {
			ns := norn.NewSignal{Name: "go", Data: []byte(`{"k":[1,"v"]}`)}
			request(t, marshalRequest(t, ns), ns)
			plainResponse(t, SignalResponse{Signal: &norn.Signal{Seq: 1, Name: "go", Data: ns.Data, Time: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}})
		},
		"GET /v1/tasks/{id}/signals": func(t *testing.T) {
			after, err := ParseAfter(queryString(t, url.Values{"after": {"7"}}))
			if err != nil || after != 7 {
				t.Fatalf("after %d, %v", after, err)
			}
			plainResponse(t, SignalsResponse{Signals: []norn.Signal{{Seq: 8, Name: "n", Time: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}}})
		},
		"GET /v1/stats": func(t *testing.T) {
			plainResponse(t, filled[norn.Stats](t))
		},
		"GET /v1/stats/throughput": func(t *testing.T) {
			now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
			since := now.Add(-90 * time.Minute)
			qs, got, err := ParseThroughputParams(queryString(t, ThroughputValues([]string{"a", "b"}, since)), now)
			if err != nil || !got.Equal(since) || !reflect.DeepEqual(qs, []string{"a", "b"}) {
				t.Fatalf("throughput params %v %v, %v", qs, got, err)
			}
			plainResponse(t, filled[norn.Throughput](t))
		},
		"POST /v1/sweep": func(t *testing.T) {
			request(t, empty, Empty{})
			plainResponse(t, filled[norn.SweepReport](t))
		},
		"POST /v1/backup": func(t *testing.T) {
			request(t, []byte(`{"dir":"/var/backups/norn"}`), BackupRequest{Dir: "/var/backups/norn"})
			plainResponse(t, BackupResponse{Backup: filled[norn.BackupInfo](t)})
		},
		"GET /v1/events": func(t *testing.T) {
			f := norn.EventFilter{Queues: []string{"a", "b"}, TaskID: "t+1&x"}
			got, err := ParseEventFilter(queryString(t, EventFilterValues(f)))
			if err != nil || !reflect.DeepEqual(got, f) {
				t.Fatalf("event filter %+v, %v", got, err)
			}
			ev := filled[norn.Event](t)
			response(t, marshalRequest(t, ev), ev) // one SSE data line
		},
		"GET /v1/openapi.json": func(t *testing.T) {}, // a static document, checked by the server's OpenAPI tests
		"GET /healthz":         func(t *testing.T) { plainResponse(t, StatusResponse{Status: "ok"}) },
		"GET /readyz":          func(t *testing.T) { plainResponse(t, StatusResponse{Status: "ok"}) },
		"error envelope": func(t *testing.T) {
			e := Error{Code: norn.CodeInvalidArgument, Message: "bad <x>", Field: "tasks[1].queue"}
			var got ErrorBody
			if err := json.Unmarshal(marshalResponse(t, ErrorBody{Error: &e}), &got); err != nil || *got.Error != e {
				t.Fatalf("error body %+v, %v", got.Error, err)
			}
			if ne := got.Error.Err(); ne.Code != e.Code || ne.Field != e.Field || ne.Message != e.Message {
				t.Fatalf("Err() = %+v", ne)
			}
			for _, c := range []norn.Code{norn.CodeNotFound, norn.CodeInvalidArgument, norn.CodeTooLarge, norn.CodeUnauthenticated,
				norn.CodePermissionDenied, norn.CodeUnavailable, norn.CodeInsufficientStorage, norn.CodeInternal, norn.CodeConflict} {
				if back := CodeOfStatus(StatusOf(c)); back != c {
					t.Errorf("code %s → %d → %s", c, StatusOf(c), back)
				}
			}
		},
	}
	if len(routes) != len(Routes)+1 {
		t.Errorf("%d round trips for %d routes", len(routes)-1, len(Routes))
	}
	for _, r := range Routes {
		if routes[r] == nil {
			t.Errorf("route %s has no round trip", r)
		}
	}
	for name, fn := range routes {
		t.Run(name, fn)
	}
}
