package client

import (
	"strconv"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/jsonenc"
)

// appendBatch writes the body of POST /v1/tasks/batch. json.Marshal would
// validate and compact every spec again (a json.RawMessage is re-scanned
// byte by byte), which was a large share of a batch submit's CPU; the specs
// have just been validated by norn.ValidateBatch, so they are written as
// they are. The output is the same JSON document json.Marshal produces,
// up to whitespace inside specs.
func appendBatch(b []byte, tasks []norn.NewTask) ([]byte, error) {
	b = append(b, `{"tasks":[`...)
	for i := range tasks {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = appendNewTask(b, &tasks[i]); err != nil {
			return nil, err
		}
	}
	return append(b, "]}"...), nil
}

// appendNewTask writes nt as json.Marshal would (same names, same omitted
// zero values), the spec verbatim.
func appendNewTask(b []byte, nt *norn.NewTask) ([]byte, error) {
	b = append(b, '{')
	if nt.ID != "" {
		b = append(b, `"id":`...)
		b = jsonenc.String(b, nt.ID)
		b = append(b, ',')
	}
	b = append(b, `"queue":`...)
	b = jsonenc.String(b, nt.Queue)
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
		if b, err = jsonenc.Marshal(b, `,"labels":`, nt.Labels); err != nil {
			return nil, err
		}
	}
	if !nt.RunAt.IsZero() {
		if b, err = jsonenc.Marshal(b, `,"run_at":`, nt.RunAt); err != nil {
			return nil, err
		}
	}
	if nt.Delay != 0 {
		b = jsonenc.Duration(b, `,"delay":`, nt.Delay)
	}
	if len(nt.DependsOn) > 0 {
		b = append(b, `,"depends_on":[`...)
		for i, id := range nt.DependsOn {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsonenc.String(b, id)
		}
		b = append(b, ']')
	}
	if nt.MaxAttempts != nil {
		b = append(b, `,"max_attempts":`...)
		b = strconv.AppendInt(b, int64(*nt.MaxAttempts), 10)
	}
	if nt.Retry != nil {
		if b, err = jsonenc.Marshal(b, `,"retry":`, nt.Retry); err != nil {
			return nil, err
		}
	}
	if nt.Timeout != 0 {
		b = jsonenc.Duration(b, `,"timeout":`, nt.Timeout)
	}
	return append(b, '}'), nil
}

// appendLeaseOps writes the body of POST /v1/leases/batch as json.Marshal
// would, results verbatim (LeaseBatch has checked them with checkRaw).
func appendLeaseOps(b []byte, ops []norn.LeaseOp) ([]byte, error) {
	b = append(b, `{"ops":[`...)
	for i := range ops {
		op := &ops[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"op":`...)
		b = jsonenc.String(b, string(op.Op))
		b = append(b, `,"id":`...)
		b = jsonenc.String(b, op.TaskID)
		b = append(b, `,"worker":`...)
		b = jsonenc.String(b, op.Worker)
		b = append(b, `,"lease":`...)
		b = strconv.AppendUint(b, op.Lease, 10)
		var err error
		if op.Progress != nil {
			// Rare enough (and NaN must fail as before) to leave to encoding/json.
			if b, err = jsonenc.Marshal(b, `,"progress":`, *op.Progress); err != nil {
				return nil, err
			}
		}
		if op.Extend != 0 {
			b = jsonenc.Duration(b, `,"extend":`, op.Extend)
		}
		if len(op.Result) > 0 {
			b = append(b, `,"result":`...)
			b = append(b, op.Result...)
		}
		if op.Error != nil {
			if b, err = jsonenc.Marshal(b, `,"error":`, op.Error); err != nil {
				return nil, err
			}
		}
		b = append(b, '}')
	}
	return append(b, "]}"...), nil
}
