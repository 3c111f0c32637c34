package server

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/nornq/norn"
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
			b = appendString(b, id)
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
	b = appendString(b, t.ID)
	b = append(b, `,"queue":`...)
	b = appendString(b, t.Queue)
	if len(t.Spec) > 0 {
		b = append(b, `,"spec":`...)
		b = append(b, t.Spec...)
	}
	b = append(b, `,"priority":`...)
	b = strconv.AppendUint(b, uint64(t.Priority), 10)
	b = append(b, `,"status":`...)
	b = appendString(b, string(t.Status))
	b = append(b, `,"progress":`...)
	if b, err = appendFloat(b, t.Progress); err != nil {
		return nil, err
	}
	if len(t.Labels) > 0 {
		if b, err = appendMarshal(b, `,"labels":`, t.Labels); err != nil {
			return nil, err
		}
	}
	if b, err = appendTime(b, `,"created":`, t.Created); err != nil {
		return nil, err
	}
	if b, err = appendTime(b, `,"updated":`, t.Updated); err != nil {
		return nil, err
	}
	if b, err = appendTime(b, `,"run_at":`, t.RunAt); err != nil {
		return nil, err
	}
	if len(t.DependsOn) > 0 {
		b = append(b, `,"depends_on":[`...)
		for i, id := range t.DependsOn {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, id)
		}
		b = append(b, ']')
	}
	if t.Owner != "" {
		b = append(b, `,"owner":`...)
		b = appendString(b, t.Owner)
	}
	if !t.Deadline.IsZero() {
		if b, err = appendTime(b, `,"deadline":`, t.Deadline); err != nil {
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
		if b, err = appendMarshal(b, `,"retry":`, t.Retry); err != nil {
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
		if b, err = appendMarshal(b, `,"errors":`, t.Errors); err != nil {
			return nil, err
		}
	}
	if len(t.History) > 0 {
		if b, err = appendMarshal(b, `,"history":`, t.History); err != nil {
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

func appendTime(b []byte, name string, t time.Time) ([]byte, error) {
	if y := t.Year(); y < 0 || y > 9999 {
		return appendMarshal(b, name, t) // json.Marshal's error
	}
	b = append(b, name...)
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), nil
}

// appendFloat formats f as encoding/json does (ES6 number formatting).
func appendFloat(b []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		_, err := json.Marshal(f)
		return nil, err
	}
	abs := math.Abs(f)
	fmt := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		fmt = 'e'
	}
	b = strconv.AppendFloat(b, f, fmt, -1, 64)
	if fmt == 'e' {
		// clean up e-09 to e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b, nil
}

// appendMarshal writes a member whose value is rare enough on the hot path
// to leave to encoding/json.
func appendMarshal(b []byte, name string, v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(append(b, name...), j...), nil
}

// appendString writes s as a JSON string. Plain printable ASCII is written
// as is; anything else goes through encoding/json so escaping, invalid
// UTF-8 and HTML-safe output stay exactly as json.Marshal has them.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			j, _ := json.Marshal(s) // a string always marshals
			return append(b, j...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
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
			if b, err = appendTime(b, `"deadline":`, r.Deadline); err != nil {
				break
			}
		}
		if r.Error != nil {
			if !r.Deadline.IsZero() {
				b = append(b, ',')
			}
			b = append(b, `"error":{"code":`...)
			b = appendString(b, string(r.Error.Code))
			b = append(b, `,"message":`...)
			b = appendString(b, r.Error.Message)
			if r.Error.Field != "" {
				b = append(b, `,"field":`...)
				b = appendString(b, r.Error.Field)
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
