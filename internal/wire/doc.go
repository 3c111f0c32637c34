// Package wire is Norn's HTTP protocol, defined once for both ends: the
// request and response bodies of every route, the error envelope and the
// mapping between error codes and HTTP statuses, the query strings of
// filters (encoded by the client, parsed strictly by the server), the
// hand-written encoders of the hot-path bodies and the strict decoder that
// names the offending field in every error. Package server and package
// client are thin adapters over it, so the two sides cannot drift apart:
// wire_test.go round-trips every route's body through both directions.
package wire

// Routes lists every route of the API as "METHOD /path" patterns (the
// syntax of net/http's ServeMux). The server registers exactly these, and
// the round-trip test covers each.
var Routes = []string{
	"POST /v1/tasks",
	"POST /v1/tasks/batch",
	"GET /v1/tasks/count",
	"GET /v1/tasks/{id}",
	"GET /v1/tasks",
	"DELETE /v1/tasks/{id}",
	"DELETE /v1/tasks",
	"PATCH /v1/tasks/{id}",
	"POST /v1/tasks/{id}/cancel",
	"POST /v1/tasks/{id}/retry",
	"POST /v1/tasks/retry",
	"POST /v1/tasks/cancel",
	"GET /v1/tasks/{id}/log",
	"POST /v1/tasks/{id}/signals",
	"GET /v1/tasks/{id}/signals",
	"POST /v1/transactions",
	"POST /v1/workers",
	"GET /v1/workers",
	"GET /v1/whoami",
	"POST /v1/queues/{queue}/claim",
	"POST /v1/claim",
	"POST /v1/tasks/{id}/heartbeat",
	"POST /v1/tasks/{id}/log",
	"POST /v1/tasks/{id}/complete",
	"POST /v1/tasks/{id}/fail",
	"POST /v1/tasks/{id}/abort",
	"POST /v1/tasks/{id}/yield",
	"POST /v1/tasks/{id}/snooze",
	"POST /v1/tasks/{id}/await",
	"POST /v1/leases/batch",
	"GET /v1/queues",
	"GET /v1/queues/{queue}",
	"PATCH /v1/queues/{queue}",
	"GET /v1/queues/{queue}/keys/{key}",
	"GET /v1/queues/{queue}/sequences",
	"GET /v1/queues/{queue}/sequences/{key}",
	"PUT /v1/queues/{queue}/keys/{key}",
	"DELETE /v1/queues/{queue}/keys/{key}",
	"GET /v1/stats",
	"GET /v1/stats/throughput",
	"POST /v1/sweep",
	"POST /v1/backup",
	"GET /v1/events",
	"GET /v1/schedules",
	"GET /v1/schedules/{name}",
	"PUT /v1/schedules/{name}",
	"PATCH /v1/schedules/{name}",
	"DELETE /v1/schedules/{name}",
	"POST /v1/schedules/{name}/trigger",
	"POST /v1/batches",
	"GET /v1/batches",
	"GET /v1/batches/{id}",
	"POST /v1/batches/{id}/seal",
	"DELETE /v1/batches/{id}",
	"GET /v1/openapi.json",
	"GET /healthz",
	"GET /readyz",
}
