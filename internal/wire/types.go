package wire

import (
	"encoding/json"
	"time"

	"github.com/nornq/norn"
)

// The bodies of every route. Where a domain type is already its own wire
// form (norn.NewTask, norn.ClaimRequest, norn.Page, norn.Stats, …) the route
// uses it directly; these types exist where the wire differs from the
// domain: an id moved to the path, an envelope member, pointer members that
// must survive omitempty.

// TaskResponse is the body of POST /v1/tasks (with Duplicate), and of
// GET, PATCH /v1/tasks/{id} and POST /v1/tasks/{id}/cancel.
type TaskResponse struct {
	Task *norn.Task `json:"task"`
	// Duplicate is true when nothing was created (the id existed, or the
	// unique key is held); Task is then the existing task.
	Duplicate bool `json:"duplicate,omitempty"`
	// Replaced is true when the submission replaced the holder of its
	// unique key in place (on_duplicate replace); Task is the holder.
	Replaced bool `json:"replaced,omitempty"`
}

// BatchRequest is the body of POST /v1/tasks/batch. The server streams it
// item by item (DecodeBatch with key "tasks"); clients write it with
// AppendBatch.
type BatchRequest struct {
	Tasks []norn.NewTask `json:"tasks"`
}

// BatchResponse is the body of POST /v1/tasks/batch: the tasks in request
// order and, once per result that created nothing, the id of the task
// returned instead (an existing id, or the holder of a unique key: an id
// may then appear more than once in both lists, and its first occurrence
// in Tasks is the one that may have been created).
type BatchResponse struct {
	Tasks      []*norn.Task `json:"tasks"`
	Duplicates []string     `json:"duplicates"`
	// Replaced lists the positions (in Tasks) of the results that
	// replaced the holder of their unique key in place (on_duplicate
	// replace); each is a duplicate too.
	Replaced []int `json:"replaced,omitempty"`
}

// ManyResponse is the body of GET /v1/tasks/{id1},{id2},….
type ManyResponse struct {
	Tasks   []*norn.Task `json:"tasks"`
	Missing []string     `json:"missing"`
}

// TasksResponse is the body of the claim routes.
type TasksResponse struct {
	Tasks []*norn.Task `json:"tasks"`
}

// CountResponse is the body of GET /v1/tasks/count.
type CountResponse struct {
	Count int64 `json:"count"`
}

// GroupedCountResponse is the body of GET /v1/tasks/count?group=queue,status.
type GroupedCountResponse struct {
	Count  int64             `json:"count"`
	Groups []norn.GroupCount `json:"groups"`
}

// DeletedResponse is the body of both DELETE routes.
type DeletedResponse struct {
	Deleted int64 `json:"deleted"`
}

// RetryRequest is the body of POST /v1/tasks/{id}/retry: both members are
// optional, and an empty body ({}) retries at once without dependents.
type RetryRequest = norn.RetryOptions

// RetriedResponse is the body of POST /v1/tasks/retry (retry by filter).
type RetriedResponse struct {
	Retried int64 `json:"retried"`
}

// CancelledResponse is the body of POST /v1/tasks/cancel (cancel by filter).
type CancelledResponse struct {
	Cancelled int64 `json:"cancelled"`
}

// Update is norn.Update on the wire (PATCH /v1/tasks/{id}). Labels is a
// pointer so that an empty, non-nil map (which clears the labels) is sent as
// {} instead of being dropped by omitempty, which would leave them alone.
type Update struct {
	Priority  *uint32            `json:"priority,omitempty"`
	RunAt     *time.Time         `json:"run_at,omitempty"`
	Labels    *map[string]string `json:"labels,omitempty"`
	IfVersion uint64             `json:"if_version,omitempty"`
}

// FromUpdate converts a domain update for the wire.
func FromUpdate(u norn.Update) Update {
	w := Update{Priority: u.Priority, RunAt: u.RunAt, IfVersion: u.IfVersion}
	if u.Labels != nil {
		l := u.Labels
		w.Labels = &l
	}
	return w
}

// Domain converts the wire form back.
func (u Update) Domain() norn.Update {
	d := norn.Update{Priority: u.Priority, RunAt: u.RunAt, IfVersion: u.IfVersion}
	if u.Labels != nil {
		// A present member replaces the labels, so it is never nil.
		d.Labels = *u.Labels
		if d.Labels == nil {
			d.Labels = map[string]string{}
		}
	}
	return d
}

// TxnUpdate is one update of a transaction.
type TxnUpdate struct {
	ID string `json:"id"`
	Update
}

// Txn is norn.Txn on the wire (POST /v1/transactions); see Update.
type Txn struct {
	Submit  []norn.NewTask     `json:"submit,omitempty"`
	Update  []TxnUpdate        `json:"update,omitempty"`
	Cancel  []string           `json:"cancel,omitempty"`
	Delete  []string           `json:"delete,omitempty"`
	Require []norn.Requirement `json:"require,omitempty"`
}

// FromTxn converts a domain transaction for the wire.
func FromTxn(tx norn.Txn) Txn {
	w := Txn{Submit: tx.Submit, Cancel: tx.Cancel, Delete: tx.Delete, Require: tx.Require}
	for _, u := range tx.Update {
		w.Update = append(w.Update, TxnUpdate{ID: u.ID, Update: FromUpdate(u.Update)})
	}
	return w
}

// Domain converts the wire form back.
func (tx Txn) Domain() norn.Txn {
	d := norn.Txn{Submit: tx.Submit, Cancel: tx.Cancel, Delete: tx.Delete, Require: tx.Require}
	for _, u := range tx.Update {
		d.Update = append(d.Update, norn.TxnUpdate{ID: u.ID, Update: u.Update.Domain()})
	}
	return d
}

// LogResponse is the body of GET /v1/tasks/{id}/log.
type LogResponse struct {
	Entries []norn.LogEntry `json:"entries"`
}

// LeaseOwner names the caller's lease in the body of every worker route on
// /v1/tasks/{id}/…; the task id is in the path.
type LeaseOwner struct {
	Worker string `json:"worker"`
	Lease  uint64 `json:"lease"`
}

// HeartbeatRequest is the body of POST /v1/tasks/{id}/heartbeat.
type HeartbeatRequest struct {
	LeaseOwner
	Progress *float64      `json:"progress,omitempty"`
	Extend   norn.Duration `json:"extend,omitzero"`
	// SignalsAfter asks for the task's signals after this sequence
	// number in the answer (absent: none are read).
	SignalsAfter *uint64 `json:"signals_after,omitempty"`
}

// AppendLogRequest is the body of POST /v1/tasks/{id}/log. An absent or
// null data member is a JSON null entry.
type AppendLogRequest struct {
	LeaseOwner
	Seq  uint64          `json:"seq,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
}

// CompleteRequest is the body of POST /v1/tasks/{id}/complete.
type CompleteRequest struct {
	LeaseOwner
	Result json.RawMessage `json:"result,omitempty"`
}

// FailRequest is the body of POST /v1/tasks/{id}/fail and /abort.
type FailRequest struct {
	LeaseOwner
	Error *norn.ErrorInfo `json:"error,omitempty"`
}

// YieldRequest is the body of POST /v1/tasks/{id}/yield.
type YieldRequest = LeaseOwner

// SnoozeRequest is the body of POST /v1/tasks/{id}/snooze: the lease and
// exactly one of delay and run_at.
type SnoozeRequest struct {
	LeaseOwner
	norn.Snooze
}

// AwaitRequest is the body of POST /v1/tasks/{id}/await.
type AwaitRequest struct {
	LeaseOwner
	norn.AwaitRequest
}

// SignalResponse is the body of POST /v1/tasks/{id}/signals.
type SignalResponse struct {
	Signal *norn.Signal `json:"signal"`
}

// SignalsResponse is the body of GET /v1/tasks/{id}/signals.
type SignalsResponse struct {
	Signals []norn.Signal `json:"signals"`
}

// DeadlineResponse is the body of a heartbeat.
type DeadlineResponse struct {
	Deadline time.Time `json:"deadline"`
	// Signals are the task's signals after the heartbeat's
	// signals_after, when it gave one.
	Signals []norn.Signal `json:"signals,omitempty"`
}

// EntryResponse is the body of a log append.
type EntryResponse struct {
	Entry norn.LogEntry `json:"entry"`
}

// Empty is the {} body of finish calls, cancel and sweep requests.
type Empty struct{}

// QueueClaimRequest is the body of POST /v1/queues/{queue}/claim: a
// norn.ClaimRequest whose queue is in the path.
type QueueClaimRequest struct {
	Worker  string        `json:"worker"`
	N       int           `json:"n"`
	Timeout norn.Duration `json:"timeout"`
	Wait    norn.Duration `json:"wait"`
	// Min, Linger and GroupBy make a batch claim (norn.ClaimRequest).
	Min     int           `json:"min,omitempty"`
	Linger  norn.Duration `json:"linger,omitzero"`
	GroupBy string        `json:"group_by,omitempty"`
}

// LeaseBatchRequest is the body of POST /v1/leases/batch. The server
// streams it (DecodeBatch with key "ops"); clients write it with
// AppendLeaseOps.
type LeaseBatchRequest struct {
	Ops []norn.LeaseOp `json:"ops"`
}

// LeaseResult is the wire form of norn.LeaseOpResult.
type LeaseResult struct {
	Deadline time.Time `json:"deadline,omitzero"`
	Error    *Error    `json:"error,omitempty"`
}

// LeaseBatchResponse is the body of POST /v1/leases/batch.
type LeaseBatchResponse struct {
	Results []LeaseResult `json:"results"`
}

// RegisterResponse is the body of POST /v1/workers.
type RegisterResponse struct {
	ID string `json:"id"`
}

// WorkersResponse is the body of GET /v1/workers.
type WorkersResponse struct {
	Workers []norn.WorkerInfo `json:"workers"`
}

// QueuesResponse is the body of GET /v1/queues.
type QueuesResponse struct {
	Queues []norn.QueueInfo `json:"queues"`
}

// QueueResponse is the body of GET and PATCH /v1/queues/{queue}.
type QueueResponse struct {
	Queue norn.QueueInfo `json:"queue"`
}

// KeyResponse is the body of GET, PUT and DELETE /v1/queues/{queue}/keys/{key}.
type KeyResponse struct {
	Key norn.KeyInfo `json:"key"`
}

// SequenceResponse is the body of GET /v1/queues/{queue}/sequences/{key}.
type SequenceResponse struct {
	Sequence norn.SequenceInfo `json:"sequence"`
}

// SequencesResponse is the body of GET /v1/queues/{queue}/sequences.
type SequencesResponse struct {
	Sequences []norn.SequenceInfo `json:"sequences"`
}

// SchedulesResponse is the body of GET /v1/schedules.
type SchedulesResponse struct {
	Schedules []*norn.Schedule `json:"schedules"`
}

// ScheduleResponse is the body of GET, PUT and PATCH /v1/schedules/{name}.
type ScheduleResponse struct {
	Schedule *norn.Schedule `json:"schedule"`
}

// OneBatch is the body of GET /v1/batches/{id} and of a seal.
type OneBatch struct {
	Batch *norn.Batch `json:"batch"`
}

// BatchesResponse is the body of GET /v1/batches.
type BatchesResponse struct {
	Batches []*norn.Batch `json:"batches"`
}

// BatchDeleted is the body of DELETE /v1/batches/{id}.
type BatchDeleted struct {
	Deleted int `json:"deleted"`
}

// StatusResponse is the body of /healthz and /readyz.
type StatusResponse struct {
	Status string `json:"status"`
	// Details, for an admin (or anyone when authentication is off): what
	// the operator should know although the server is ready, such as a
	// database that replicates asynchronously.
	Details map[string]string `json:"details,omitempty"`
}

// WhoamiResponse tells a caller what its token may do, so a UI can hide
// what the role cannot do instead of trying it.
type WhoamiResponse struct {
	// Role is client, worker or admin (admin when authentication is off).
	Role string `json:"role"`
	// Queues the token is limited to; absent means every queue.
	Queues []string `json:"queues,omitempty"`
	// Auth reports whether the server checks tokens at all.
	Auth bool `json:"auth"`
}

// StreamLine is one NDJSON line of GET /v1/tasks with
// Accept: application/x-ndjson: a task, or a final {"error":{…}} when the
// server failed after the status was sent.
type StreamLine struct {
	norn.Task
	Error *Error `json:"error"`
}
