package norn

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// A batch groups tasks so that something can happen once all of them have
// ended: on_complete is submitted once every member ended, whatever its
// outcome, and on_success once every member completed. Members join by
// naming the batch at submit (NewTask.Batch) until the batch is sealed;
// before the seal a batch cannot be done, since more members may come.
//
// The decisions below are the stores' common ground: what a new batch
// may say, what the callbacks look like when they fire (BatchCallback),
// and when they fire (BatchFiring). The stores keep the batch and its
// membership and call BatchFiring in the same transaction as the
// callbacks' submission, so a callback is submitted at most once; its id
// (BatchCallbackID) is derived from the batch, so even a second attempt
// would be an idempotent duplicate.

// BatchState is where a batch is in its life.
type BatchState string

// Batch states.
const (
	// BatchOpen: members may still join.
	BatchOpen BatchState = "open"
	// BatchSealed: no member may join; the batch is waiting for its members to end.
	BatchSealed BatchState = "sealed"
	// BatchDone: sealed and every member ended; on_complete was submitted.
	BatchDone BatchState = "done"
)

// Valid reports whether s is one of the batch states.
func (s BatchState) Valid() bool { return s == BatchOpen || s == BatchSealed || s == BatchDone }

// Callback kinds, as named in the callbacks' labels.
const (
	CallbackComplete = "complete"
	CallbackSuccess  = "success"
)

// Labels Norn adds to a batch callback: the batch, which callback it is,
// and the members' counts by status when it fired.
const (
	LabelBatch     = "norn.batch"
	LabelCallback  = "norn.callback"
	LabelTotal     = "norn.total"
	labelCountPfx  = "norn."
	callbackLabels = 6 // batch, callback, total and the three terminal statuses
)

// NewBatch creates a batch.
type NewBatch struct {
	// ID is optional (a UUIDv7 when empty); creating a batch whose id
	// exists is a conflict.
	ID     string            `json:"id,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// OnSuccess is submitted once every member completed; OnComplete once
	// every member ended. Each is validated here, when the batch is
	// created, not when it fires. Their id is Norn's (BatchCallbackID).
	OnSuccess  *NewTask `json:"on_success,omitempty"`
	OnComplete *NewTask `json:"on_complete,omitempty"`
	// Seal creates the batch sealed, with Tasks as its only members.
	Seal bool `json:"seal,omitempty"`
	// Tasks are submitted as members, atomically with the batch (their
	// Batch field must be empty or the batch's id).
	Tasks []NewTask `json:"tasks,omitempty"`
}

// Batch is a stored batch.
type Batch struct {
	ID         string            `json:"id"`
	State      BatchState        `json:"state"`
	Labels     map[string]string `json:"labels,omitempty"`
	OnSuccess  *NewTask          `json:"on_success,omitempty"`
	OnComplete *NewTask          `json:"on_complete,omitempty"`
	Created    time.Time         `json:"created"`
	Sealed     time.Time         `json:"sealed,omitzero"`
	Done       time.Time         `json:"done,omitzero"`
	// Total and Counts are the members that exist now, by status (a
	// member deleted, or purged by retention, is no longer counted).
	Total  int            `json:"total"`
	Counts map[Status]int `json:"counts"`
	// Final is the members' counts by status when the batch became done.
	Final map[Status]int `json:"final,omitempty"`
	// SuccessTask and CompleteTask are the ids of the callbacks once
	// submitted.
	SuccessTask  string `json:"success_task,omitempty"`
	CompleteTask string `json:"complete_task,omitempty"`
}

// BatchCreated is the answer to CreateBatch.
type BatchCreated struct {
	Batch *Batch      `json:"batch"`
	Tasks []Submitted `json:"tasks,omitempty"`
}

// BatchQuery selects batches; empty fields match all. Batches come in id
// order.
type BatchQuery struct {
	State  BatchState        `json:"state,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// After: only batches whose id sorts after this one (the previous
	// page's last id).
	After string `json:"after,omitempty"`
	// Limit: page size (default 100, max 1000).
	Limit int `json:"limit,omitempty"`
}

// BatchAPI is implemented by every store and the HTTP client.
type BatchAPI interface {
	// CreateBatch creates a batch, with its first members when nb.Tasks
	// is not empty, in one transaction.
	CreateBatch(ctx context.Context, nb NewBatch) (*BatchCreated, error)
	GetBatch(ctx context.Context, id string) (*Batch, error)
	ListBatches(ctx context.Context, q BatchQuery) ([]*Batch, error)
	// SealBatch closes the batch to new members; sealing a sealed or
	// done batch is a no-op answering its state.
	SealBatch(ctx context.Context, id string) (*Batch, error)
	// DeleteBatch removes the batch; with members, its members too. It
	// answers how many members it deleted.
	DeleteBatch(ctx context.Context, id string, members bool) (int, error)
}

// BatchNotFound is the not_found error for a batch id.
func BatchNotFound(field, id string) *Error {
	return &Error{Code: CodeNotFound, Field: field, Message: fmt.Sprintf("batch %q not found", truncate(id, 60))}
}

// BatchSealedError is the conflict of a join to a sealed (or done) batch.
func BatchSealedError(field, id string) *Error {
	return &Error{Code: CodeConflict, Field: field, Message: fmt.Sprintf("batch %q is sealed: no task can join it", truncate(id, 60))}
}

// CheckNewBatch decides whether a batch may be created with id: not when
// a batch of that id exists, nor while tasks of a deleted batch of that id
// remain (members of them: they would join the new one).
func CheckNewBatch(id string, exists bool, members int) error {
	if exists {
		return Errorf(CodeConflict, "batch %q exists", id)
	}
	if members > 0 {
		return Errorf(CodeConflict, "batch id %q is still named by %d tasks of a deleted batch; choose another id or delete them", id, members)
	}
	return nil
}

// BatchCallbackID is the id of a batch's callback of kind: in Norn's
// reserved namespace, so no caller can take it first.
func BatchCallbackID(batch, kind string) string {
	return InternalIDPrefix + "batch:" + batch + ":" + kind
}

// MaxBatchIDLength keeps a callback's id (BatchCallbackID) within
// MaxIDLength.
const MaxBatchIDLength = MaxIDLength - len(InternalIDPrefix+"batch::complete")

// ValidateBatchID checks a batch id.
func ValidateBatchID(field, id string) error {
	if err := ValidateID(field, id); err != nil {
		return err
	}
	if len(id) > MaxBatchIDLength {
		return Invalid(field, "batch id is %d bytes, more than the limit of %d", len(id), MaxBatchIDLength)
	}
	return nil
}

// Prepare validates nb, gives it a UUIDv7 id when it has none, and
// returns its members to submit, each naming the batch.
func (nb *NewBatch) Prepare() ([]NewTask, error) {
	if err := nb.Validate(); err != nil {
		return nil, err
	}
	if nb.ID == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		nb.ID = u.String()
	}
	tasks := slices.Clone(nb.Tasks)
	for i := range tasks {
		tasks[i].Batch = nb.ID
	}
	return tasks, ValidateBatch("tasks", tasks)
}

// Validate checks a new batch without touching any store: its id, labels,
// both callbacks as submissions (their ids are Norn's; their labels leave
// room for the ones Norn adds) and its members.
func (nb *NewBatch) Validate() error {
	if nb.ID != "" {
		if err := ValidateBatchID("id", nb.ID); err != nil {
			return err
		}
	}
	if err := ValidateLabels("labels", nb.Labels); err != nil {
		return err
	}
	for _, c := range []struct {
		field string
		t     *NewTask
	}{{"on_success", nb.OnSuccess}, {"on_complete", nb.OnComplete}} {
		if c.t == nil {
			continue
		}
		if err := validateCallback(c.field, c.t); err != nil {
			return err
		}
	}
	if len(nb.Tasks) > MaxBatch {
		return Invalid("tasks", "has %d tasks, more than the limit of %d", len(nb.Tasks), MaxBatch)
	}
	for i := range nb.Tasks {
		if b := nb.Tasks[i].Batch; b != "" && b != nb.ID {
			return Invalid(fmt.Sprintf("tasks[%d].batch", i), "names batch %q; members created with a batch join that batch", truncate(b, 60))
		}
	}
	return nil
}

func validateCallback(field string, t *NewTask) error {
	if t.ID != "" {
		return Invalid(field+".id", "a callback's id is Norn's (%s<batch>:%s); leave it empty", InternalIDPrefix+"batch:", field[3:])
	}
	if t.Batch != "" {
		return Invalid(field+".batch", "a callback cannot join a batch")
	}
	if len(t.DependsOn) > 0 {
		return Invalid(field+".depends_on", "a callback runs when its batch is done; it cannot have dependencies")
	}
	if len(t.Labels) > MaxLabels-callbackLabels {
		return Invalid(field+".labels", "has %d labels; a callback may have at most %d (Norn adds %d)", len(t.Labels), MaxLabels-callbackLabels, callbackLabels)
	}
	for k := range t.Labels {
		if k == LabelBatch || k == LabelCallback || k == LabelTotal || statusLabel(k) {
			return Invalid(field+".labels", "label %q is set by Norn on a callback", k)
		}
	}
	if err := t.Validate(); err != nil {
		return WithFieldPrefix(err, field)
	}
	return nil
}

func statusLabel(k string) bool {
	for _, s := range AllStatuses {
		if k == labelCountPfx+string(s) {
			return true
		}
	}
	return false
}

// BatchFiring says which callbacks a sealed batch fires now, given its
// members' statuses by count: complete once none is pending, success once
// every one completed. A callback already submitted (its id recorded) is
// not fired again, and one the batch does not define is never fired.
func BatchFiring(b *Batch, counts map[Status]int) (complete, success bool) {
	if b.State == BatchOpen {
		return false, false
	}
	pending, total := 0, 0
	for st, n := range counts {
		total += n
		if !st.Terminal() {
			pending += n
		}
	}
	if pending > 0 {
		return false, false
	}
	complete = b.State == BatchSealed
	success = b.OnSuccess != nil && b.SuccessTask == "" && counts[StatusCompleted] == total
	return complete, success
}

// BatchCallback is the task a batch submits for its callback of kind
// (CallbackComplete or CallbackSuccess), with the members' counts at that
// moment in its labels; ok is false when the batch defines no such
// callback.
func BatchCallback(b *Batch, kind string, counts map[Status]int) (NewTask, bool) {
	src := b.OnComplete
	if kind == CallbackSuccess {
		src = b.OnSuccess
	}
	if src == nil {
		return NewTask{}, false
	}
	nt := *src
	nt.ID = BatchCallbackID(b.ID, kind)
	nt.Labels = maps.Clone(src.Labels)
	if nt.Labels == nil {
		nt.Labels = map[string]string{}
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	nt.Labels[LabelBatch] = b.ID
	nt.Labels[LabelCallback] = kind
	nt.Labels[LabelTotal] = strconv.Itoa(total)
	for _, st := range []Status{StatusCompleted, StatusAborted, StatusCancelled} {
		nt.Labels[labelCountPfx+string(st)] = strconv.Itoa(counts[st])
	}
	return nt, true
}

// FinishBatch records a firing decided by BatchFiring on b: done and the
// final counts with complete, the callbacks' ids as submitted.
func FinishBatch(b *Batch, now time.Time, counts map[Status]int, complete bool, completeID, successID string) {
	if complete {
		b.State = BatchDone
		b.Done = now
		b.Final = maps.Clone(counts)
		b.CompleteTask = completeID
	}
	if successID != "" {
		b.SuccessTask = successID
	}
}

// MatchBatch reports whether b matches q's filters (not its paging).
func MatchBatch(q *BatchQuery, b *Batch) bool {
	if q.State != "" && b.State != q.State {
		return false
	}
	for k, v := range q.Labels {
		if got, ok := b.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Validate checks a batch query.
func (q *BatchQuery) Validate() error {
	if q.State != "" && !q.State.Valid() {
		return Invalid("state", "unknown batch state %q (open, sealed or done)", truncate(string(q.State), 40))
	}
	if q.Limit < 0 || q.Limit > MaxListLimit {
		return Invalid("limit", "must be 0..%d", MaxListLimit)
	}
	return ValidateLabels("labels", q.Labels)
}

// PageLimit is q's page size with the default applied.
func (q *BatchQuery) PageLimit() int {
	if q.Limit == 0 {
		return DefaultListLimit
	}
	return q.Limit
}

// BatchStatuses orders a count map for display: every status, terminal
// last, with zeros, so a batch's counts always list the same keys.
func BatchStatuses(counts map[Status]int) map[Status]int {
	out := make(map[Status]int, len(AllStatuses))
	for _, s := range AllStatuses {
		out[s] = counts[s]
	}
	return out
}

// CloneBatch returns a deep copy of b.
func CloneBatch(b *Batch) *Batch {
	c := *b
	c.Labels = maps.Clone(b.Labels)
	c.Counts = maps.Clone(b.Counts)
	c.Final = maps.Clone(b.Final)
	if b.OnSuccess != nil {
		t := *b.OnSuccess
		c.OnSuccess = &t
	}
	if b.OnComplete != nil {
		t := *b.OnComplete
		c.OnComplete = &t
	}
	return &c
}
