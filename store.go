package norn

import (
	"context"
	"encoding/json"
	"slices"
	"time"
)

// Store is the whole of Norn's contract: every client, worker and admin
// operation of docs/api.md. store/embedded, store/postgres and client (HTTP)
// implement it, and store/storetest checks that they behave the same.
//
// Rules every implementation follows:
//   - ctx comes first on every call; a cancelled ctx aborts waiting calls.
//   - Expected failures are *Error values (match with errors.Is against the
//     sentinels); nothing is changed when an error is returned.
//   - Returned tasks are copies the caller may keep and modify.
//   - No caller-supplied code runs while the store holds a lock.
type Store interface {
	ClientAPI
	WorkerAPI
	AdminAPI
	ScheduleAPI
	BatchAPI
	Awaiter
	Signaler
	Sequencer
	// Close releases the store. Calls after Close fail with ErrClosed.
	Close() error
}

// ClientAPI submits, reads, changes and removes tasks.
type ClientAPI interface {
	// Submit stores tasks atomically: either all are stored or none (an
	// invalid task rejects the whole batch, its error naming "tasks[i].field").
	// Task ids are unique across the whole store, not per queue. Submitting
	// an id that already exists in the same queue returns the existing task
	// with Duplicate set and changes nothing; an id that exists in another
	// queue is a conflict ("tasks[i].id") that says nothing about that task.
	// Ids may depend on ids earlier or later in the same batch. Submitting
	// no tasks succeeds with no results.
	Submit(ctx context.Context, tasks ...NewTask) ([]Submitted, error)
	// Get returns one task, or ErrNotFound.
	Get(ctx context.Context, id string) (*Task, error)
	// GetMany returns the tasks that exist, in request order, and the ids
	// that do not; a repeated id is answered once (GetManyIDs).
	GetMany(ctx context.Context, ids []string) (found []*Task, missing []string, err error)
	// List returns one page of tasks matching q and a cursor for the next
	// page ("" when there is none).
	List(ctx context.Context, q Query) (Page, error)
	// Stream iterates over every task matching q (q.Limit caps the total if
	// > 0) without holding the result set in memory. Close it when done.
	Stream(ctx context.Context, q Query) (TaskIterator, error)
	// Count returns how many tasks match f.
	Count(ctx context.Context, f Filter) (int64, error)
	// CountGrouped returns counts of tasks matching f grouped by queue and
	// status, omitting zero groups, sorted by queue then status order.
	CountGrouped(ctx context.Context, f Filter) ([]GroupCount, error)
	// Cancel makes a scheduled, blocked, ready or running task cancelled.
	// Cancelling a cancelled task returns it unchanged; a completed or
	// aborted one is ErrConflict.
	Cancel(ctx context.Context, id string) (*Task, error)
	// Update changes priority, run_at or labels of a task that is not
	// running and not terminal (ErrConflict otherwise, and on an IfVersion
	// mismatch).
	Update(ctx context.Context, id string, u Update) (*Task, error)
	// Delete removes a task in any status, with its history and log.
	Delete(ctx context.Context, id string) error
	// DeleteMatching removes every task matching f and returns how many. An
	// empty filter is refused (invalid_argument) so nobody wipes a store by accident.
	DeleteMatching(ctx context.Context, f Filter) (int64, error)
	// Retry runs again a task that ended without success (a redrive):
	// aborted or cancelled → ready, or scheduled until o.RunAt, or blocked
	// while dependencies are not completed (norn.DecideRetry decides).
	// Attempts restart at 0; errors and history are kept and a TaskRedrive
	// entry added; the terminal time is cleared (retention no longer
	// applies); the lease number is kept, so the next claim increments it
	// and fencing stays monotonic. A completed or pending task is
	// ErrConflict naming its status. With o.WithDependents, every task
	// aborted with dependency_failed because of this one (transitively)
	// waits for its dependencies again, with its own TaskRedrive entry.
	Retry(ctx context.Context, id string, o RetryOptions) (*Task, error)
	// RetryMatching retries every aborted or cancelled task matching f, in
	// batches (not atomically, in constant memory), and returns how many.
	// Other matches are skipped, as are tasks whose dependencies failed. An
	// empty filter is refused (invalid_argument), as for DeleteMatching.
	RetryMatching(ctx context.Context, f Filter) (int64, error)
	// CancelMatching cancels every pending task (scheduled, blocked, ready
	// or running) matching f, in batches (not atomically, in constant
	// memory), and returns how many. Ended matches are skipped. Each cancel
	// is the one Cancel makes (a running attempt ends, dependents abort
	// with dependency_failed). An empty filter is refused, as for
	// DeleteMatching.
	CancelMatching(ctx context.Context, f Filter) (int64, error)
	// ReadLog returns log entries with Seq > after, in order, at most limit
	// (0 = all); none is an empty slice.
	ReadLog(ctx context.Context, id string, after uint64, limit int) ([]LogEntry, error)
	// Transact applies a transaction all or nothing.
	Transact(ctx context.Context, tx Txn) (*TxnResult, error)
}

// WorkerAPI is what a worker needs: claim, then report on its leases.
type WorkerAPI interface {
	// RegisterWorker returns a new unique id (NewWorkerID: random, so ids
	// do not reveal how many workers there are) and keeps info with it,
	// Registrar included; info must pass WorkerInfo.Validate.
	RegisterWorker(ctx context.Context, info WorkerInfo) (string, error)
	// Claim leases up to N ready tasks from the first non-paused queue in
	// order that has any (then the next queue, to fill N), by priority desc
	// then ready time. With Wait > 0 and nothing ready it waits until a task
	// becomes ready or Wait passes, then returns what it has (possibly none).
	Claim(ctx context.Context, req ClaimRequest) ([]*Task, error)
	// Heartbeat extends the lease and optionally records progress. It returns
	// the new deadline: now + hb.Extend, or now + the length of the current
	// lease (as the claim, or the last heartbeat with Extend, granted it).
	// ErrLeaseLost, ErrCancelled or ErrNotFound tell the worker to stop.
	Heartbeat(ctx context.Context, ref LeaseRef, hb Heartbeat) (time.Time, error)
	// AppendLog appends to the task's update log under a live lease. With
	// Seq 0 the next number is assigned; a non-zero Seq must equal the next
	// number (ErrConflict otherwise), which makes retried appends safe: an
	// append repeating the entry already stored under that Seq (same lease,
	// same data) returns that entry.
	AppendLog(ctx context.Context, ref LeaseRef, entry LogAppend) (LogEntry, error)
	// Complete, Fail, Abort and Yield end the caller's lease. Repeating the
	// call that ended it (same worker, lease and outcome, see IsRepeat)
	// succeeds again without changing anything, so a worker whose reply
	// was lost may retry; any other call on a lost lease is ErrLeaseLost.
	//
	// Complete finishes the task successfully (progress becomes 1).
	Complete(ctx context.Context, ref LeaseRef, result json.RawMessage) error
	// Fail records an error and retries with backoff if the task's retry
	// policy allows, otherwise aborts it.
	Fail(ctx context.Context, ref LeaseRef, e ErrorInfo) error
	// Abort finishes the task unsuccessfully for good.
	Abort(ctx context.Context, ref LeaseRef, e ErrorInfo) error
	// Yield gives the task back: ready at once, history TaskYield, and the
	// attempt does not count.
	Yield(ctx context.Context, ref LeaseRef) error
	// Snooze puts the task back for later: scheduled until s's time (ready
	// at once when that is not in the future), history TaskSnooze, and the
	// attempt does not count. The lease number is kept (the next claim
	// increments it) and the owner stays as the last owner.
	Snooze(ctx context.Context, ref LeaseRef, s Snooze) (*Task, error)
	// LeaseBatch applies many lease operations; each has its own result and
	// one failing does not stop the others. An op's error names it
	// (BatchOpError: field "ops[i]" or "ops[i].…").
	LeaseBatch(ctx context.Context, ops []LeaseOp) ([]LeaseOpResult, error)
}

// AdminAPI covers queues, workers, statistics, events and the monitor.
type AdminAPI interface {
	// Queues lists every queue that has tasks or settings, with counts.
	Queues(ctx context.Context) ([]QueueInfo, error)
	// Queue returns one queue (a queue nobody used yet reads as empty with defaults).
	Queue(ctx context.Context, name string) (QueueInfo, error)
	// UpdateQueue pauses/resumes a queue and changes its defaults.
	UpdateQueue(ctx context.Context, name string, u QueueUpdate) (QueueInfo, error)
	// Workers lists registered workers with when they were last seen.
	Workers(ctx context.Context) ([]WorkerInfo, error)
	// Stats returns counts by queue×status, totals and active workers.
	Stats(ctx context.Context) (Stats, error)
	// Sweep runs the monitor duties due now (timeouts, delays and backoffs,
	// dependency release, retention purge) and reports what it did. Stores
	// run these on their own; Sweep makes them deterministic under a fake
	// clock and lets operators force a pass.
	Sweep(ctx context.Context) (SweepReport, error)
	// Subscribe streams task state changes matching f. Delivery is best
	// effort: a subscriber that falls behind receives an event of kind
	// EventLagged and should re-read state.
	Subscribe(ctx context.Context, f EventFilter) (EventStream, error)
}

// NewTask is a submission. Zero values mean "default": a UUIDv7 id,
// priority 0, run now, the queue's timeout/retry/max_attempts defaults.
type NewTask struct {
	// ID is optional; supply one (1..128 chars) to make submission
	// idempotent. Ids are unique across queues.
	ID       string            `json:"id,omitempty"`
	Queue    string            `json:"queue"`
	Spec     json.RawMessage   `json:"spec,omitempty"`
	Priority uint32            `json:"priority,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	// Traceparent is a W3C traceparent ("00-<trace id>-<span id>-<flags>")
	// to store with the task, and Tracestate its optional companion. Empty:
	// the store takes the span of the submitting context, if any (see
	// WithTrace).
	Traceparent string `json:"traceparent,omitempty"`
	Tracestate  string `json:"tracestate,omitempty"`
	// RunAt delays the task until this time.
	RunAt time.Time `json:"run_at,omitzero"`
	// Delay delays the task by this long from submission (ignored if RunAt is set).
	Delay     Duration `json:"delay,omitzero"`
	DependsOn []string `json:"depends_on,omitempty"`
	// OnDependencyFailure is what a dependency that fails (ends aborted or
	// cancelled, or is deleted while pending) does to this task:
	// DependencyAbort (the default, "") aborts it with dependency_failed;
	// DependencyRun counts the dependency as ended, so the task becomes
	// ready once every dependency ended, whatever the outcome.
	OnDependencyFailure string `json:"on_dependency_failure,omitempty"`
	// MaxAttempts nil = queue default (0 = unlimited).
	MaxAttempts *int `json:"max_attempts,omitempty"`
	// Retry nil = queue default (none).
	Retry *RetryPolicy `json:"retry,omitempty"`
	// Timeout 0 = queue default (DefaultTimeout).
	Timeout Duration `json:"timeout,omitzero"`
	// UniqueKey, when set, makes the submission a no-op while a task of
	// the same queue with the same key is not terminal: Submit returns that
	// task with Duplicate set (see ValidateUniqueKey for the limits).
	UniqueKey string `json:"unique_key,omitempty"`
	// UniqueFor extends UniqueKey to tasks of the queue with the key that
	// ended (became terminal) less than this long ago. Needs UniqueKey.
	UniqueFor Duration `json:"unique_for,omitzero"`
	// OnDuplicate is what a submission whose unique key is held does:
	// DuplicateKeep (the default) answers the holder unchanged;
	// DuplicateReplace replaces a holder that has not started, or makes
	// this task the successor of one that has (see debounce.go).
	OnDuplicate string `json:"on_duplicate,omitempty"`
	// DebounceMax caps how far replacements push a holder's run time: at
	// most this long after the holder was first submitted. Needs
	// OnDuplicate DuplicateReplace; 0 is no cap.
	DebounceMax Duration `json:"debounce_max,omitzero"`
	// ConcurrencyKey groups tasks for the queue's flow control: at most
	// key_limit (or the key's own limit) of one key run at once, and fair_by
	// concurrency_key rotates claims across keys. Optional, at most
	// MaxConcurrencyKeyLength bytes; a task without one is limited only by
	// the queue's max_running and rate_limit.
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// MaxRuntime limits each attempt: the monitor stops it at claim time +
	// MaxRuntime even while its worker heartbeats. 0 = queue default
	// (whose 0 is no limit).
	MaxRuntime Duration `json:"max_runtime,omitzero"`
	// ExpiresAt, or ExpireIn from the time the task may first run (RunAt,
	// or submission), is the deadline by which it must have started: past
	// it a task not running ends aborted with CodeExpired, a claim never
	// hands it out, and no retry is scheduled at or past it (see Expiry).
	// Give one of the two; zero means no expiry.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	ExpireIn  Duration  `json:"expire_in,omitzero"`
	// Batch joins the task to this batch (see NewBatch), which must exist
	// and not be sealed.
	Batch string `json:"batch,omitempty"`
	// SequenceKey puts the task in the sequence of its queue and this key:
	// the members run one at a time, in submit order whatever their
	// priority, and a failed head holds the sequence through its retries
	// (see the sequence rules in sequence.go and the queue's
	// SequenceOnFailure). A task in a sequence cannot have DependsOn: the
	// sequence orders it.
	SequenceKey string `json:"sequence_key,omitempty"`
}

// Submitted is one result of Submit.
type Submitted struct {
	Task *Task `json:"task"`
	// Duplicate is true when nothing was created: the id already existed,
	// or another task of the queue holds the unique key. Task is then that
	// existing task (whose id may differ from the one submitted).
	Duplicate bool `json:"duplicate,omitempty"`
	// Replaced is true when the submission (on_duplicate replace)
	// replaced the holder of its unique key in place: Task is the holder
	// as replaced (Duplicate is set too: nothing was created).
	Replaced bool `json:"replaced,omitempty"`
}

// Order is the sort order of List and Stream.
type Order string

// Orders.
const (
	// OrderID (default): by id ascending; UUIDv7 ids make this oldest first.
	OrderID Order = ""
	// OrderNewest: by id descending.
	OrderNewest Order = "newest"
	// OrderPriority: priority descending, then id ascending.
	OrderPriority Order = "priority"
)

// Filter selects tasks. Empty fields match everything; all set fields must match.
type Filter struct {
	// Queues: any of these queues.
	Queues []string `json:"queues,omitempty"`
	// Statuses: any of these statuses (use ParseStatuses for aliases).
	Statuses []Status `json:"statuses,omitempty"`
	// Labels: every key must be present with this value.
	Labels map[string]string `json:"labels,omitempty"`
	// Owner: the current or last owner.
	Owner string `json:"owner,omitempty"`
	// IDContains: a substring of the id (the dashboard's text search).
	IDContains string `json:"id_contains,omitempty"`
	// DependsOn: tasks that list this id among their dependencies.
	DependsOn string `json:"depends_on,omitempty"`
	// UniqueKey: tasks submitted with this unique key (live or ended).
	UniqueKey string `json:"unique_key,omitempty"`
	// Batch: the members of this batch.
	Batch         string    `json:"batch,omitempty"`
	CreatedAfter  time.Time `json:"created_after,omitzero"`
	CreatedBefore time.Time `json:"created_before,omitzero"`
	UpdatedAfter  time.Time `json:"updated_after,omitzero"`
	UpdatedBefore time.Time `json:"updated_before,omitzero"`
}

// Query is a Filter plus paging and view options.
type Query struct {
	Filter
	// Limit: page size for List (default 100, max 1000); total cap for Stream (0 = all).
	Limit int `json:"limit,omitempty"`
	// Cursor from a previous Page.NextCursor. Opaque.
	Cursor  string `json:"cursor,omitempty"`
	Order   Order  `json:"order,omitempty"`
	Summary bool   `json:"summary,omitempty"`
}

// Page is one page of List.
type Page struct {
	Tasks      []*Task `json:"tasks"`
	NextCursor string  `json:"next_cursor,omitempty"`
}

// Iterator walks a result without holding it in memory, like sql.Rows.
type Iterator[T any] interface {
	// Next advances; false at the end or on error (check Err).
	Next() bool
	// Item returns the current item, valid until the next call to Next.
	Item() T
	// Err returns the error that stopped iteration, if any.
	Err() error
	// Close releases resources; safe to call more than once.
	Close() error
}

// TaskIterator streams tasks.
type TaskIterator = Iterator[*Task]

// EventStream streams events.
type EventStream = Iterator[Event]

// GroupCount is one queue×status count.
type GroupCount struct {
	Queue  string `json:"queue"`
	Status Status `json:"status"`
	Count  int64  `json:"count"`
}

// Update changes a not-running task. Nil fields are left alone.
type Update struct {
	Priority *uint32 `json:"priority,omitempty"`
	// RunAt moves the start time; a past or zero time makes the task ready now.
	RunAt *time.Time `json:"run_at,omitempty"`
	// Labels replaces the labels entirely when non-nil (an empty map clears them).
	Labels map[string]string `json:"labels,omitempty"`
	// IfVersion, when non-zero, must equal the task's version (ErrConflict otherwise).
	IfVersion uint64 `json:"if_version,omitempty"`
}

// Txn is an atomic set of operations: all of them apply or none does.
// Operations apply in the order submit, update, cancel, delete, after every
// Require assertion holds.
type Txn struct {
	Submit  []NewTask     `json:"submit,omitempty"`
	Update  []TxnUpdate   `json:"update,omitempty"`
	Cancel  []string      `json:"cancel,omitempty"`
	Delete  []string      `json:"delete,omitempty"`
	Require []Requirement `json:"require,omitempty"`
}

// TxnUpdate is one update inside a transaction.
type TxnUpdate struct {
	ID string `json:"id"`
	Update
}

// Requirement asserts a task exists (and, if Version > 0, is at that version).
type Requirement struct {
	ID      string `json:"id"`
	Version uint64 `json:"version,omitempty"`
}

// TxnResult reports what a transaction did.
type TxnResult struct {
	Submitted []Submitted `json:"submitted"`
	Updated   []*Task     `json:"updated"`
	Cancelled []*Task     `json:"cancelled"`
	Deleted   int         `json:"deleted"`
}

// WorkerInfo describes a registered worker.
type WorkerInfo struct {
	// ID is assigned by RegisterWorker.
	ID string `json:"id,omitempty"`
	// Name is free-form (host, process) for operators.
	Name       string    `json:"name,omitempty"`
	Queues     []string  `json:"queues,omitempty"`
	Registered time.Time `json:"registered,omitzero"`
	// LastSeen is refreshed by claims (also those that return nothing) and
	// heartbeats; stores may coarsen it to a few seconds.
	LastSeen time.Time `json:"last_seen,omitzero"`
	// Registrar names who registered the worker: over HTTP with tokens,
	// the server sets it to a key derived from the calling token (never
	// the token) and lets only that token claim and make lease calls as
	// this worker. Stores keep it with the registration and return it
	// from WorkerRegistry.Worker; it is never sent over the API.
	Registrar string `json:"-"`
}

// ClaimRequest asks for up to N tasks.
type ClaimRequest struct {
	Worker string `json:"worker"`
	// Queues in preference order (strict: a queue is tried only when the
	// ones before it have nothing ready), unless Weights are given.
	Queues []string `json:"queues"`
	// Weights, when given, replace the strict order: each claim tries the
	// queues in a random order in which a queue comes first with a
	// probability proportional to its weight (1 to MaxWeight; a queue of
	// Queues without one weighs 1). Over many claims each queue gets its
	// share while it has work, and a queue with work is never starved.
	Weights map[string]int `json:"weights,omitempty"`
	// N tasks at most (default 1, max 1000).
	N int `json:"n,omitempty"`
	// Timeout overrides the tasks' own timeout as the lease length when > 0.
	Timeout Duration `json:"timeout,omitzero"`
	// Wait long-polls up to this long when nothing is ready (max 5m).
	Wait Duration `json:"wait,omitzero"`
	// Min makes a batch claim: it answers only once at least Min tasks
	// are ready in its queues, or once the one ready longest has waited
	// Linger, and then takes up to N; until then it waits (within Wait)
	// and, when Wait ends first, answers none. 0 or 1: answer as soon as
	// one is ready. At most N.
	Min int `json:"min,omitempty"`
	// Linger bounds how long a ready task waits for a batch of Min to
	// gather (0: until Min are ready). Needs Min.
	Linger Duration `json:"linger,omitzero"`
	// GroupBy makes every task of one answer share a value:
	// "concurrency_key", or "label:NAME" for the task's label NAME (its
	// current value; in a queue fair by that label, the value the task
	// entered the queue with, its fair group); tasks without it share the
	// value "". The answer holds
	// the tasks of one group only: the group of the first task in claim
	// order whose group has Min ready tasks in the claim's queues, or
	// whose task ready longest has waited Linger (without Min: the group
	// of the first task in claim order). Flow limits still apply to the
	// group's tasks, so an answer may hold fewer than Min, never more
	// than the limits allow. Each task keeps its own lease and outcome.
	// See ChooseGroup.
	GroupBy string `json:"group_by,omitempty"`
}

// LeaseRef names a lease: every worker call must present the current one.
type LeaseRef struct {
	TaskID string `json:"id"`
	Worker string `json:"worker"`
	Lease  uint64 `json:"lease"`
}

// Heartbeat is the optional payload of a heartbeat.
type Heartbeat struct {
	// Progress 0..1, nil to leave unchanged.
	Progress *float64 `json:"progress,omitempty"`
	// Extend, when > 0, is the length of the lease from now (default: the
	// length of the current lease, as granted by the claim).
	Extend Duration `json:"extend,omitzero"`
}

// LogAppend is one log append.
type LogAppend struct {
	Seq  uint64          `json:"seq,omitempty"`
	Data json.RawMessage `json:"data"`
}

// LeaseOpKind names a batched lease operation.
type LeaseOpKind string

// Lease operation kinds.
const (
	OpHeartbeat LeaseOpKind = "heartbeat"
	OpComplete  LeaseOpKind = "complete"
	OpFail      LeaseOpKind = "fail"
	OpAbort     LeaseOpKind = "abort"
	OpYield     LeaseOpKind = "yield"
	OpSnooze    LeaseOpKind = "snooze"
)

// LeaseOp is one operation of LeaseBatch.
type LeaseOp struct {
	Op LeaseOpKind `json:"op"`
	LeaseRef
	Heartbeat
	// Snooze is the delay or time of a snooze op.
	Snooze
	Result json.RawMessage `json:"result,omitempty"`
	Error  *ErrorInfo      `json:"error,omitempty"`
}

// LeaseOpResult is the outcome of one LeaseOp: Err is nil on success.
type LeaseOpResult struct {
	// Deadline is the new deadline after a heartbeat.
	Deadline time.Time `json:"deadline,omitzero"`
	Err      *Error    `json:"error,omitempty"`
}

// Retention says how long terminal tasks are kept, per terminal status;
// 0 keeps them forever.
type Retention struct {
	Completed Duration `json:"completed"`
	Aborted   Duration `json:"aborted"`
	Cancelled Duration `json:"cancelled"`
}

// For returns the retention of a terminal status (0 for others).
func (r Retention) For(s Status) time.Duration {
	switch s {
	case StatusCompleted:
		return r.Completed.D()
	case StatusAborted:
		return r.Aborted.D()
	case StatusCancelled:
		return r.Cancelled.D()
	}
	return 0
}

// DefaultRetention keeps completed tasks a day and failed or cancelled ones a
// week, as River does: long enough to inspect, short enough not to grow forever.
var DefaultRetention = Retention{
	Completed: Duration(24 * time.Hour),
	Aborted:   Duration(7 * 24 * time.Hour),
	Cancelled: Duration(7 * 24 * time.Hour),
}

// QueueDefaults apply to tasks submitted to a queue that do not set their own.
type QueueDefaults struct {
	// Timeout: default DefaultTimeout (10s).
	Timeout Duration `json:"timeout"`
	// Retry: default none.
	Retry *RetryPolicy `json:"retry,omitempty"`
	// MaxAttempts: default 0 (unlimited).
	MaxAttempts int `json:"max_attempts"`
	// Retention applies to the queue's terminal tasks, measured from when
	// they became terminal, using the setting current at sweep time.
	// Default DefaultRetention.
	Retention Retention `json:"retention"`
	// MaxRuntime: default 0 (no limit on how long one attempt may run).
	MaxRuntime Duration `json:"max_runtime"`
	// ExpireIn is the expire_in of the queue's tasks that give neither
	// expires_at nor expire_in (counted from when each may first run).
	// Default 0: no expiry.
	ExpireIn Duration `json:"expire_in,omitzero"`
	// SequenceOnFailure is what an aborted head does to its sequence:
	// SequenceHalt (the default, "") halts it until the head is retried or
	// deleted; SequenceContinue moves on to the next member.
	SequenceOnFailure string `json:"sequence_on_failure,omitempty"`
}

// DefaultQueueDefaults returns the defaults of a queue nobody configured.
func DefaultQueueDefaults() QueueDefaults {
	return QueueDefaults{Timeout: Duration(DefaultTimeout), Retention: DefaultRetention}
}

// QueueInfo describes a queue.
type QueueInfo struct {
	Name     string           `json:"name"`
	Paused   bool             `json:"paused"`
	Counts   map[Status]int64 `json:"counts"`
	Defaults QueueDefaults    `json:"defaults"`
	// QueueFlow: the queue's flow-control settings.
	QueueFlow
	// Keys lists, for a flow-controlled queue read alone (Queue, not
	// Queues), every concurrency key that has its own settings or running
	// tasks, sorted by key.
	Keys []KeyInfo `json:"keys,omitempty"`
	// RateTokens is, for a rate-limited queue, how many tokens its bucket
	// holds now (fractional: it refills continuously).
	RateTokens *float64 `json:"rate_tokens,omitempty"`
	// ClaimPath is, for a queue read alone from a store with several claim
	// paths, the path this node's next claim of it takes and why.
	ClaimPath ClaimPath `json:"claim_path,omitzero"`
}

// QueueUpdate changes a queue. Nil fields are left alone.
type QueueUpdate struct {
	Paused      *bool        `json:"paused,omitempty"`
	Timeout     *Duration    `json:"timeout,omitempty"`
	Retry       *RetryPolicy `json:"retry,omitempty"`
	MaxAttempts *int         `json:"max_attempts,omitempty"`
	Retention   *Retention   `json:"retention,omitempty"`
	// MaxRuntime 0 removes the limit.
	MaxRuntime *Duration `json:"max_runtime,omitempty"`
	// ExpireIn sets QueueDefaults.ExpireIn; 0 removes it.
	ExpireIn *Duration `json:"expire_in,omitempty"`
	// SequenceOnFailure sets QueueDefaults.SequenceOnFailure ("" or
	// "halt": the default).
	SequenceOnFailure *string `json:"sequence_on_failure,omitempty"`
	// MaxRunning and KeyLimit set the queue's flow limits (0 removes one).
	MaxRunning *int `json:"max_running,omitempty"`
	KeyLimit   *int `json:"key_limit,omitempty"`
	// FairBy sets QueueFlow.FairBy ("" turns fair claiming off).
	FairBy *string `json:"fair_by,omitempty"`
	// RateLimit sets the queue's rate limit; per_second 0 removes it.
	RateLimit *RateLimit `json:"rate_limit,omitempty"`
	// KeyRateLimit sets QueueFlow.KeyRateLimit; per_second 0 removes it.
	KeyRateLimit *RateLimit `json:"key_rate_limit,omitempty"`
	// Keys sets concurrency keys' own settings; a nil value removes a
	// key's settings (the queue's apply again).
	Keys map[string]*KeySettings `json:"keys,omitempty"`
}

// Stats summarises the store.
type Stats struct {
	Counts        []GroupCount     `json:"counts"`
	Totals        map[Status]int64 `json:"totals"`
	Total         int64            `json:"total"`
	Workers       int              `json:"workers"`
	ActiveWorkers int              `json:"active_workers"`
}

// ActiveWorkerWindow is how recently a worker must have been seen to count as active.
const ActiveWorkerWindow = time.Minute

// SweepReport counts what one monitor pass did.
type SweepReport struct {
	TimedOut int `json:"timed_out"`
	Released int `json:"released"`
	Aborted  int `json:"aborted"`
	Purged   int `json:"purged"`
	// Fired counts tasks submitted by schedules.
	Fired int `json:"fired"`
	// Expired counts tasks aborted because they reached their expiry
	// without running.
	Expired int `json:"expired"`
	// Callbacks counts batch callbacks submitted (norn.Batch).
	Callbacks int `json:"callbacks"`
}

// EventKind names a task state change.
type EventKind string

// Event kinds: the history types plus these.
const (
	EventSubmitted EventKind = "TaskSubmit"
	EventUpdated   EventKind = "TaskUpdate"
	// EventDeleted: the task was deleted (by a call or by retention). Its
	// Status is the one the task had, so a subscriber keeping counts knows
	// which to lower, and its Version one past the task's last, as for
	// every other change.
	EventDeleted  EventKind = "TaskDelete"
	EventProgress EventKind = "TaskProgress"
	// EventLagged: the subscriber fell behind and events were dropped.
	EventLagged EventKind = "Lagged"
	// EventExpired: a task reached its expiry without running and was
	// aborted (its history entry is a TaskAbort with CodeExpired).
	EventExpired EventKind = "TaskExpire"
)

// Event is a task state change, or (Count above 0) several of them.
type Event struct {
	Kind    EventKind `json:"kind"`
	TaskID  string    `json:"task_id,omitempty"`
	Queue   string    `json:"queue,omitempty"`
	Status  Status    `json:"status,omitempty"`
	Version uint64    `json:"version,omitempty"`
	Time    time.Time `json:"time"`
	// Count, when above 0, makes this a counted event: Count tasks of
	// Queue changed by Kind into Status in one write, by Time at the
	// latest; TaskID and Version are empty. Only a subscription with
	// EventFilter.Counts receives counted events.
	Count int `json:"count,omitempty"`
}

// Tasks is how many task changes e stands for: Count for a counted event,
// 0 for EventLagged, 1 otherwise.
func (e Event) Tasks() int {
	switch {
	case e.Kind == EventLagged:
		return 0
	case e.Count > 0:
		return e.Count
	}
	return 1
}

// CountedKinds are the event kinds a store may deliver as counted events
// to a subscription with EventFilter.Counts: the three that every task
// goes through, one event per task, at the rate tasks are worked.
var CountedKinds = []EventKind{EventSubmitted, EventKind(TaskAssignment), EventKind(TaskComplete)}

// EventFilter selects events; empty fields match all.
type EventFilter struct {
	Queues []string `json:"queues,omitempty"`
	TaskID string   `json:"task_id,omitempty"`
	// Counts says the subscriber only counts submissions, assignments and
	// completions (CountedKinds), so a store may deliver them as counted
	// events (Event.Count) instead of one per task; every other kind
	// still comes one event per task. The Postgres store then sends those
	// three kinds between nodes as one line per queue and write instead of
	// one per task, as long as no node has a subscriber without Counts.
	// A filter with TaskID set gets no counted events (they name no task).
	// Default false: one event per task.
	Counts bool `json:"counts,omitempty"`
}

// Match reports whether e passes the filter (lagged events always pass).
func (f EventFilter) Match(e Event) bool {
	if e.Kind == EventLagged {
		return true
	}
	if f.TaskID != "" && e.TaskID != f.TaskID {
		return false
	}
	if e.Count > 0 && !f.Counts {
		return false
	}
	if len(f.Queues) > 0 && !slices.Contains(f.Queues, e.Queue) {
		return false
	}
	return true
}

// Clock is the time source of a store. The embedded store defaults to the
// process clock; the Postgres store defaults to the database's clock and uses
// a Clock only when one is injected (tests).
type Clock interface {
	Now() time.Time
}

// SystemClock is the process clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }
