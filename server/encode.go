package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/jsonenc"
)

// Responses that carry many tasks (batch submit, claim) are encoded by
// hand. encoding/json re-validates and compacts every json.RawMessage it
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

// taskSizeHint estimates the encoded size of tasks (fixed members ~320
// bytes, plus the variable ones).
func taskSizeHint(tasks []*norn.Task) int {
	n := 64
	for _, t := range tasks {
		if t != nil {
			n += 320 + len(t.ID) + len(t.Queue) + len(t.Spec) + len(t.Result) + len(t.Owner)
		}
	}
	return n
}

// writeRaw writes an encoded JSON body (without the final newline, which
// writeRaw adds as writeJSON does).
func writeRaw(w http.ResponseWriter, status int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeTasks writes {"tasks":[…]} and, when dups is non-nil,
// "duplicates":[…] after it.
func writeTasks(w http.ResponseWriter, status int, tasks []*norn.Task, dups []string) {
	b := append(make([]byte, 0, taskSizeHint(tasks)+16*len(dups)), `{"tasks":[`...)
	var err error
	for i, t := range tasks {
		if i > 0 {
			b = append(b, ',')
		}
		if b, err = appendTask(b, t); err != nil {
			break
		}
	}
	b = append(b, ']')
	if dups != nil {
		b = append(b, `,"duplicates":[`...)
		for i, id := range dups {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.String(b, id)
		}
		b = append(b, ']')
	}
	b = append(b, "}\n"...)
	if err != nil {
		// The answer writeJSON gives when json.Marshal fails.
		writeRaw(w, http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`+"\n"))
	} else {
		writeRaw(w, status, b)
	}
}

// appendTask writes t as json.Marshal would, spec and result verbatim. A
// nil task is null. The error is json.Marshal's for values it refuses
// (times outside years 0–9999, NaN progress).
func appendTask(b []byte, t *norn.Task) ([]byte, error) {
	if t == nil {
		return append(b, "null"...), nil
	}
	var err error
	b = append(b, `{"id":`...)
	b = jsonenc.String(b, t.ID)
	b = append(b, `,"queue":`...)
	b = jsonenc.String(b, t.Queue)
	if len(t.Spec) > 0 {
		b = append(b, `,"spec":`...)
		b = append(b, t.Spec...)
	}
	b = append(b, `,"priority":`...)
	b = strconv.AppendUint(b, uint64(t.Priority), 10)
	b = append(b, `,"status":`...)
	b = jsonenc.String(b, string(t.Status))
	b = append(b, `,"progress":`...)
	if b, err = jsonenc.Float(b, t.Progress); err != nil {
		return nil, err
	}
	if len(t.Labels) > 0 {
		if b, err = jsonenc.Marshal(b, `,"labels":`, t.Labels); err != nil {
			return nil, err
		}
	}
	if b, err = jsonenc.Time(b, `,"created":`, t.Created); err != nil {
		return nil, err
	}
	if b, err = jsonenc.Time(b, `,"updated":`, t.Updated); err != nil {
		return nil, err
	}
	if b, err = jsonenc.Time(b, `,"run_at":`, t.RunAt); err != nil {
		return nil, err
	}
	if len(t.DependsOn) > 0 {
		b = append(b, `,"depends_on":[`...)
		for i, id := range t.DependsOn {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.String(b, id)
		}
		b = append(b, ']')
	}
	if t.Owner != "" {
		b = append(b, `,"owner":`...)
		b = jsonenc.String(b, t.Owner)
	}
	if !t.Deadline.IsZero() {
		if b, err = jsonenc.Time(b, `,"deadline":`, t.Deadline); err != nil {
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
		if b, err = jsonenc.Marshal(b, `,"retry":`, t.Retry); err != nil {
			return nil, err
		}
	}
	b = append(b, `,"timeout":"`...)
	b = append(b, time.Duration(t.Timeout).String()...)
	b = append(b, '"')
	if len(t.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, t.Result...)
	}
	if len(t.Errors) > 0 {
		if b, err = jsonenc.Marshal(b, `,"errors":`, t.Errors); err != nil {
			return nil, err
		}
	}
	if len(t.History) > 0 {
		if b, err = jsonenc.Marshal(b, `,"history":`, t.History); err != nil {
			return nil, err
		}
	}
	if t.HistoryDropped != 0 {
		b = append(b, `,"history_dropped":`...)
		b = strconv.AppendInt(b, int64(t.HistoryDropped), 10)
	}
	b = append(b, `,"version":`...)
	b = strconv.AppendUint(b, t.Version, 10)
	return append(b, '}'), nil
}

// writeLeaseResults writes {"results":[…]} of a lease batch as json.Marshal
// would: most results are {} or a deadline.
func writeLeaseResults(w http.ResponseWriter, results []leaseResult) {
	b := append(make([]byte, 0, 32+48*len(results)), `{"results":[`...)
	var err error
	for i := range results {
		r := &results[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '{')
		if !r.Deadline.IsZero() {
			if b, err = jsonenc.Time(b, `"deadline":`, r.Deadline); err != nil {
				break
			}
		}
		if r.Error != nil {
			if !r.Deadline.IsZero() {
				b = append(b, ',')
			}
			b = append(b, `"error":{"code":`...)
			b = jsonenc.String(b, string(r.Error.Code))
			b = append(b, `,"message":`...)
			b = jsonenc.String(b, r.Error.Message)
			if r.Error.Field != "" {
				b = append(b, `,"field":`...)
				b = jsonenc.String(b, r.Error.Field)
			}
			b = append(b, '}')
		}
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	if err != nil {
		writeRaw(w, http.StatusInternalServerError, []byte(`{"error":{"code":"internal","message":"internal error"}}`+"\n"))
	} else {
		writeRaw(w, http.StatusOK, b)
	}
}
