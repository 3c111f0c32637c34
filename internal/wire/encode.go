package wire

import (
	"strconv"
	"time"

	"github.com/nornq/norn"
)

// The bodies that carry many tasks (batch submit and claim responses, batch
// submit and lease batch requests) are encoded by hand. encoding/json re-validates and compacts every json.RawMessage it
// writes (spec, result), which was most of the cost of a 1000-task submit
// response; the stores only hold specs and results that were validated when
// they came in, so they are written verbatim. The documents are the ones
// json.Marshal produces (same members, same omitted values), up to
// whitespace inside specs and results; TestAppendTaskMatchesMarshal holds
// the two equal.

// Response buffers are allocated once at their estimated size rather than
// recycled through a sync.Pool: pooled buffers of hundreds of KiB stay live
// across garbage collections and made the heap measurements of the stream
// conformance test (and any caller's) swing by megabytes.

// TaskSizeHint estimates the encoded size of tasks (fixed members ~320
// bytes, plus the variable ones).
func TaskSizeHint(tasks []*norn.Task) int {
	n := 64
	for _, t := range tasks {
		if t != nil {
			n += 320 + len(t.ID) + len(t.Queue) + len(t.ConcurrencyKey) + len(t.Spec) + len(t.Result) + len(t.Owner) + len(t.Traceparent) + len(t.Tracestate)
		}
	}
	return n
}

// AppendTasksBody writes {"tasks":[…]} and, when dups is non-nil,
// "duplicates":[…] after it, and a final newline: the body of a batch
// submit (BatchResponse) or a claim (TasksResponse), as json.Marshal would
// write it. The error is json.Marshal's for a task it refuses.
func AppendTasksBody(b []byte, tasks []*norn.Task, dups []string) ([]byte, error) {
	return appendTasksBody(b, tasks, dups, nil)
}

// AppendBatchResponse writes r (a BatchResponse) as json.Marshal would,
// like AppendTasksBody.
func AppendBatchResponse(b []byte, r *BatchResponse) ([]byte, error) {
	return appendTasksBody(b, r.Tasks, r.Duplicates, r.Replaced)
}

func appendTasksBody(b []byte, tasks []*norn.Task, dups []string, replaced []int) ([]byte, error) {
	b = append(b, `{"tasks":[`...)
	var err error
	for i, t := range tasks {
		if i > 0 {
			b = append(b, ',')
		}
		YieldEvery(i)
		if b, err = AppendTask(b, t); err != nil {
			return nil, err
		}
	}
	b = append(b, ']')
	if dups != nil {
		b = append(b, `,"duplicates":[`...)
		for i, id := range dups {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonString(b, id)
		}
		b = append(b, ']')
	}
	if len(replaced) > 0 {
		b = append(b, `,"replaced":[`...)
		for i, n := range replaced {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(n), 10)
		}
		b = append(b, ']')
	}
	return append(b, "}\n"...), nil
}

// AppendTask writes t as json.Marshal would, spec and result verbatim. A
// nil task is null. The error is json.Marshal's for values it refuses
// (times outside years 0–9999, NaN progress).
func AppendTask(b []byte, t *norn.Task) ([]byte, error) {
	if t == nil {
		return append(b, "null"...), nil
	}
	b, err := appendTaskWhat(b, t)
	if err != nil {
		return nil, err
	}
	if b, err = appendTaskLease(b, t); err != nil {
		return nil, err
	}
	if b, err = appendTaskOutcome(b, t); err != nil {
		return nil, err
	}
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, t.Version, 10)
	return append(b, '}'), nil
}

// appendTaskWhat opens the task's object with what it is and where it
// stands: id, queue, spec, priority, status, progress, labels, trace
// context, times and dependencies.
func appendTaskWhat(b []byte, t *norn.Task) ([]byte, error) {
	var err error
	b = append(b, `{"id":`...)
	b = jsonString(b, t.ID)
	b = append(b, `,"queue":`...)
	b = jsonString(b, t.Queue)
	if len(t.Spec) > 0 {
		b = append(b, `,"spec":`...)
		b = append(b, t.Spec...)
	}
	b = append(b, `,"priority":`...)
	b = strconv.AppendUint(b, uint64(t.Priority), 10)
	b = append(b, `,"status":`...)
	b = jsonString(b, string(t.Status))
	b = append(b, `,"progress":`...)
	if b, err = jsonFloat(b, t.Progress); err != nil {
		return nil, err
	}
	if len(t.Labels) > 0 {
		if b, err = jsonMarshal(b, `,"labels":`, t.Labels); err != nil {
			return nil, err
		}
	}
	b = appendTrace(b, t.Traceparent, t.Tracestate)
	if b, err = jsonTime(b, `,"created":`, t.Created); err != nil {
		return nil, err
	}
	if b, err = jsonTime(b, `,"updated":`, t.Updated); err != nil {
		return nil, err
	}
	if b, err = jsonTime(b, `,"run_at":`, t.RunAt); err != nil {
		return nil, err
	}
	if len(t.DependsOn) > 0 {
		b = append(b, `,"depends_on":[`...)
		for i, id := range t.DependsOn {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonString(b, id)
		}
		b = append(b, ']')
	}
	if t.OnDependencyFailure != "" {
		b = append(b, `,"on_dependency_failure":`...)
		b = jsonString(b, t.OnDependencyFailure)
	}
	return b, nil
}

// appendTaskLease writes the lease and the policies an attempt runs
// under: owner, deadline, lease, attempts, retry, timeout, keys, runtime
// limit and start.
func appendTaskLease(b []byte, t *norn.Task) ([]byte, error) {
	var err error
	if t.Owner != "" {
		b = append(b, `,"owner":`...)
		b = jsonString(b, t.Owner)
	}
	if !t.Deadline.IsZero() {
		if b, err = jsonTime(b, `,"deadline":`, t.Deadline); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"lease":`...)
	b = strconv.AppendUint(b, t.Lease, 10)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(t.Attempts), 10)
	b = append(b, `,"max_attempts":`...)
	b = strconv.AppendInt(b, int64(t.MaxAttempts), 10)
	if t.Retry != nil {
		if b, err = jsonMarshal(b, `,"retry":`, t.Retry); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"timeout":"`...)
	b = append(b, time.Duration(t.Timeout).String()...)
	b = append(b, '"')
	if t.UniqueKey != "" {
		b = append(b, `,"unique_key":`...)
		b = jsonString(b, t.UniqueKey)
	}
	if t.ConcurrencyKey != "" {
		b = append(b, `,"concurrency_key":`...)
		b = jsonString(b, t.ConcurrencyKey)
	}
	if t.MaxRuntime != 0 {
		b = jsonDuration(b, `,"max_runtime":`, t.MaxRuntime)
	}
	if !t.ExpiresAt.IsZero() {
		if b, err = jsonTime(b, `,"expires_at":`, t.ExpiresAt); err != nil {
			return nil, err
		}
	}
	if t.Batch != "" {
		b = append(b, `,"batch":`...)
		b = jsonString(b, t.Batch)
	}
	if t.SequenceKey != "" {
		b = append(b, `,"sequence_key":`...)
		b = jsonString(b, t.SequenceKey)
	}
	if t.SignalWait != nil {
		if b, err = jsonMarshal(b, `,"signal_wait":`, t.SignalWait); err != nil {
			return nil, err
		}
	}
	if !t.Started.IsZero() {
		if b, err = jsonTime(b, `,"started":`, t.Started); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// appendTaskOutcome writes what the attempts left: result, errors and
// history.
func appendTaskOutcome(b []byte, t *norn.Task) ([]byte, error) {
	var err error
	if len(t.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, t.Result...)
	}
	if len(t.Errors) > 0 {
		if b, err = jsonMarshal(b, `,"errors":`, t.Errors); err != nil {
			return nil, err
		}
	}
	if len(t.DependencyResults) > 0 {
		if b, err = jsonMarshal(b, `,"dependency_results":`, t.DependencyResults); err != nil {
			return nil, err
		}
	}
	if len(t.Signals) > 0 {
		if b, err = jsonMarshal(b, `,"signals":`, t.Signals); err != nil {
			return nil, err
		}
	}
	if len(t.History) > 0 {
		if b, err = jsonMarshal(b, `,"history":`, t.History); err != nil {
			return nil, err
		}
	}
	if t.HistoryDropped != 0 {
		b = append(b, `,"history_dropped":`...)
		b = strconv.AppendInt(b, int64(t.HistoryDropped), 10)
	}
	return b, nil
}

// appendTrace writes the trace context members, omitted when empty.
func appendTrace(b []byte, traceparent, tracestate string) []byte {
	if traceparent != "" {
		b = append(b, `,"traceparent":`...)
		b = jsonString(b, traceparent)
	}
	if tracestate != "" {
		b = append(b, `,"tracestate":`...)
		b = jsonString(b, tracestate)
	}
	return b
}

// AppendLeaseResults writes the LeaseBatchResponse body (and a final
// newline) as json.Marshal would: most results are {} or a deadline.
func AppendLeaseResults(b []byte, results []LeaseResult) ([]byte, error) {
	b = append(b, `{"results":[`...)
	var err error
	for i := range results {
		r := &results[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		if !r.Deadline.IsZero() {
			if b, err = jsonTime(b, `"deadline":`, r.Deadline); err != nil {
				return nil, err
			}
		}
		if r.Error != nil {
			if !r.Deadline.IsZero() {
				b = append(b, ',')
			}
			b = append(b, `"error":{"code":`...)
			b = jsonString(b, string(r.Error.Code))
			b = append(b, `,"message":`...)
			b = jsonString(b, r.Error.Message)
			if r.Error.Field != "" {
				b = append(b, `,"field":`...)
				b = jsonString(b, r.Error.Field)
			}
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	return append(b, "]}\n"...), nil
}

// AppendBatch writes the body of POST /v1/tasks/batch. json.Marshal would
// validate and compact every spec again (a json.RawMessage is re-scanned
// byte by byte), which was a large share of a batch submit's CPU; the specs
// have just been validated by norn.ValidateBatch, so they are written as
// they are. The output is the same JSON document json.Marshal produces,
// up to whitespace inside specs.
func AppendBatch(b []byte, tasks []norn.NewTask) ([]byte, error) {
	b = append(b, `{"tasks":[`...)
	for i := range tasks {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = AppendNewTask(b, &tasks[i]); err != nil {
			return nil, err
		}
	}
	return append(b, "]}"...), nil
}

// AppendNewTask writes nt as json.Marshal would (same names, same omitted
// zero values), the spec verbatim.
func AppendNewTask(b []byte, nt *norn.NewTask) ([]byte, error) {
	b = append(b, '{')
	if nt.ID != "" {
		b = append(b, `"id":`...)
		b = jsonString(b, nt.ID)
		b = append(b, ',')
	}
	b = append(b, `"queue":`...)
	b = jsonString(b, nt.Queue)
	if len(nt.Spec) > 0 {
		b = append(b, `,"spec":`...)
		b = append(b, nt.Spec...)
	}
	if nt.Priority != 0 {
		b = append(b, `,"priority":`...)
		b = strconv.AppendUint(b, uint64(nt.Priority), 10)
	}
	var err error
	if len(nt.Labels) > 0 {
		if b, err = jsonMarshal(b, `,"labels":`, nt.Labels); err != nil {
			return nil, err
		}
	}
	b = appendTrace(b, nt.Traceparent, nt.Tracestate)
	if !nt.RunAt.IsZero() {
		if b, err = jsonMarshal(b, `,"run_at":`, nt.RunAt); err != nil {
			return nil, err
		}
	}
	if nt.Delay != 0 {
		b = jsonDuration(b, `,"delay":`, nt.Delay)
	}
	if len(nt.DependsOn) > 0 {
		b = append(b, `,"depends_on":[`...)
		for i, id := range nt.DependsOn {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonString(b, id)
		}
		b = append(b, ']')
	}
	if nt.OnDependencyFailure != "" {
		b = append(b, `,"on_dependency_failure":`...)
		b = jsonString(b, nt.OnDependencyFailure)
	}
	if nt.MaxAttempts != nil {
		b = append(b, `,"max_attempts":`...)
		b = strconv.AppendInt(b, int64(*nt.MaxAttempts), 10)
	}
	if nt.Retry != nil {
		if b, err = jsonMarshal(b, `,"retry":`, nt.Retry); err != nil {
			return nil, err
		}
	}
	if nt.Timeout != 0 {
		b = jsonDuration(b, `,"timeout":`, nt.Timeout)
	}
	if nt.UniqueKey != "" {
		b = append(b, `,"unique_key":`...)
		b = jsonString(b, nt.UniqueKey)
	}
	if nt.UniqueFor != 0 {
		b = jsonDuration(b, `,"unique_for":`, nt.UniqueFor)
	}
	if nt.OnDuplicate != "" {
		b = append(b, `,"on_duplicate":`...)
		b = jsonString(b, nt.OnDuplicate)
	}
	if nt.DebounceMax != 0 {
		b = jsonDuration(b, `,"debounce_max":`, nt.DebounceMax)
	}
	if nt.ConcurrencyKey != "" {
		b = append(b, `,"concurrency_key":`...)
		b = jsonString(b, nt.ConcurrencyKey)
	}
	if nt.MaxRuntime != 0 {
		b = jsonDuration(b, `,"max_runtime":`, nt.MaxRuntime)
	}
	if !nt.ExpiresAt.IsZero() {
		var err error
		if b, err = jsonTime(b, `,"expires_at":`, nt.ExpiresAt); err != nil {
			return nil, err
		}
	}
	if nt.ExpireIn != 0 {
		b = jsonDuration(b, `,"expire_in":`, nt.ExpireIn)
	}
	if nt.Batch != "" {
		b = append(b, `,"batch":`...)
		b = jsonString(b, nt.Batch)
	}
	if nt.SequenceKey != "" {
		b = append(b, `,"sequence_key":`...)
		b = jsonString(b, nt.SequenceKey)
	}
	return append(b, '}'), nil
}

// AppendLeaseOps writes the body of POST /v1/leases/batch as json.Marshal
// would, results verbatim (LeaseBatch has checked them with checkRaw).
func AppendLeaseOps(b []byte, ops []norn.LeaseOp) ([]byte, error) {
	b = append(b, `{"ops":[`...)
	for i := range ops {
		op := &ops[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"op":`...)
		b = jsonString(b, string(op.Op))
		b = append(b, `,"id":`...)
		b = jsonString(b, op.TaskID)
		b = append(b, `,"worker":`...)
		b = jsonString(b, op.Worker)
		b = append(b, `,"lease":`...)
		b = strconv.AppendUint(b, op.Lease, 10)
		var err error
		if op.Progress != nil {
			// Rare enough (and NaN must fail as before) to leave to encoding/json.
			if b, err = jsonMarshal(b, `,"progress":`, *op.Progress); err != nil {
				return nil, err
			}
		}
		if op.Extend != 0 {
			b = jsonDuration(b, `,"extend":`, op.Extend)
		}
		if op.Delay != 0 {
			b = jsonDuration(b, `,"delay":`, op.Delay)
		}
		if !op.RunAt.IsZero() {
			if b, err = jsonMarshal(b, `,"run_at":`, op.RunAt); err != nil {
				return nil, err
			}
		}
		if op.UntilSignal != "" {
			b = append(b, `,"until_signal":`...)
			b = jsonString(b, op.UntilSignal)
		}
		if op.Timeout != 0 {
			b = jsonDuration(b, `,"timeout":`, op.Timeout)
		}
		if op.Scope != "" {
			b = append(b, `,"scope":`...)
			b = jsonString(b, op.Scope)
		}
		if len(op.Result) > 0 {
			b = append(b, `,"result":`...)
			b = append(b, op.Result...)
		}
		if op.Error != nil {
			if b, err = jsonMarshal(b, `,"error":`, op.Error); err != nil {
				return nil, err
			}
		}
		b = append(b, '}')
	}
	return append(b, "]}"...), nil
}

// BatchSizeHint guesses the encoded size of a batch so the body is
// allocated once.
func BatchSizeHint(tasks []norn.NewTask) int {
	n := 16
	for i := range tasks {
		n += 64 + len(tasks[i].ID) + len(tasks[i].Queue) + len(tasks[i].Spec) + len(tasks[i].Traceparent) + len(tasks[i].Tracestate)
	}
	return n
}
