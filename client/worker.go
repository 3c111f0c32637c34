package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// RegisterWorker allocates a worker id (POST /v1/workers).
func (c *Client) RegisterWorker(ctx context.Context, info norn.WorkerInfo) (string, error) {
	info.ID = ""
	var out wire.RegisterResponse
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/workers", body: info}, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

// Claim leases up to req.N tasks (POST /v1/claim). With req.Wait it long
// polls; the HTTP timeout, if any, is stretched beyond Wait.
func (c *Client) Claim(ctx context.Context, req norn.ClaimRequest) ([]*norn.Task, error) {
	hc := c.hc
	if req.Wait > 0 {
		hc = c.withTimeoutAtLeast(req.Wait.D() + claimSlack)
	}
	if req.Queues == nil {
		req.Queues = []string{}
	}
	var out wire.TasksResponse
	if err := c.doWith(ctx, hc, request{method: http.MethodPost, path: "/v1/claim", body: req}, &out); err != nil {
		return nil, err
	}
	if out.Tasks == nil {
		out.Tasks = []*norn.Task{}
	}
	return out.Tasks, nil
}

// Heartbeat extends a lease and optionally records progress
// (POST /v1/tasks/{id}/heartbeat); it returns the new deadline.
func (c *Client) Heartbeat(ctx context.Context, ref norn.LeaseRef, hb norn.Heartbeat) (time.Time, error) {
	if err := checkID("id", ref.TaskID); err != nil {
		return time.Time{}, err
	}
	var out wire.DeadlineResponse
	body := wire.HeartbeatRequest{LeaseOwner: owner(ref), Progress: hb.Progress, Extend: hb.Extend}
	if err := c.do(ctx, request{method: http.MethodPost, path: taskPath(ref.TaskID, "/heartbeat"), body: body}, &out); err != nil {
		return time.Time{}, err
	}
	return out.Deadline, nil
}

// AppendLog appends to the task's update log (POST /v1/tasks/{id}/log).
func (c *Client) AppendLog(ctx context.Context, ref norn.LeaseRef, entry norn.LogAppend) (norn.LogEntry, error) {
	if err := checkID("id", ref.TaskID); err != nil {
		return norn.LogEntry{}, err
	}
	if err := checkRaw("data", entry.Data); err != nil {
		return norn.LogEntry{}, err
	}
	// Refused here as every store refuses it: a log entry needs data.
	if err := entry.Validate(); err != nil {
		return norn.LogEntry{}, err
	}
	var out wire.EntryResponse
	body := wire.AppendLogRequest{LeaseOwner: owner(ref), Seq: entry.Seq, Data: entry.Data}
	if err := c.do(ctx, request{method: http.MethodPost, path: taskPath(ref.TaskID, "/log"), body: body}, &out); err != nil {
		return norn.LogEntry{}, err
	}
	return out.Entry, nil
}

// owner is the lease part of a worker route's body.
func owner(ref norn.LeaseRef) wire.LeaseOwner {
	return wire.LeaseOwner{Worker: ref.Worker, Lease: ref.Lease}
}

func (c *Client) finish(ctx context.Context, ref norn.LeaseRef, verb string, body any) error {
	if err := checkID("id", ref.TaskID); err != nil {
		return err
	}
	return c.do(ctx, request{method: http.MethodPost, path: taskPath(ref.TaskID, "/"+verb), body: body}, &wire.Empty{})
}

// Complete finishes a task successfully (POST /v1/tasks/{id}/complete).
func (c *Client) Complete(ctx context.Context, ref norn.LeaseRef, result json.RawMessage) error {
	if err := checkRaw("result", result); err != nil {
		return err
	}
	return c.finish(ctx, ref, "complete", wire.CompleteRequest{LeaseOwner: owner(ref), Result: result})
}

// Fail records an error and retries or aborts per the task's policy
// (POST /v1/tasks/{id}/fail).
func (c *Client) Fail(ctx context.Context, ref norn.LeaseRef, e norn.ErrorInfo) error {
	return c.finish(ctx, ref, "fail", wire.FailRequest{LeaseOwner: owner(ref), Error: &e})
}

// Abort finishes a task unsuccessfully for good (POST /v1/tasks/{id}/abort).
func (c *Client) Abort(ctx context.Context, ref norn.LeaseRef, e norn.ErrorInfo) error {
	return c.finish(ctx, ref, "abort", wire.FailRequest{LeaseOwner: owner(ref), Error: &e})
}

// Yield gives a task back without counting the attempt (POST /v1/tasks/{id}/yield).
func (c *Client) Yield(ctx context.Context, ref norn.LeaseRef) error {
	return c.finish(ctx, ref, "yield", owner(ref))
}

// Snooze puts a task back for later without counting the attempt
// (POST /v1/tasks/{id}/snooze) and returns it.
func (c *Client) Snooze(ctx context.Context, ref norn.LeaseRef, s norn.Snooze) (*norn.Task, error) {
	if err := checkID("id", ref.TaskID); err != nil {
		return nil, err
	}
	var out wire.TaskResponse
	body := wire.SnoozeRequest{LeaseOwner: owner(ref), Snooze: s}
	if err := c.do(ctx, request{method: http.MethodPost, path: taskPath(ref.TaskID, "/snooze"), body: body}, &out); err != nil {
		return nil, err
	}
	return out.Task, nil
}

// Await submits children of the running task ref holds and makes it wait
// for them (POST /v1/tasks/{id}/await); see norn.Awaiter.
func (c *Client) Await(ctx context.Context, ref norn.LeaseRef, req norn.AwaitRequest) (*norn.AwaitResult, error) {
	if err := checkID("id", ref.TaskID); err != nil {
		return nil, err
	}
	if err := req.Validate(0); err != nil {
		return nil, err
	}
	var out norn.AwaitResult
	body := wire.AwaitRequest{LeaseOwner: owner(ref), AwaitRequest: req}
	if err := c.do(ctx, request{method: http.MethodPost, path: taskPath(ref.TaskID, "/await"), body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// LeaseBatch applies many lease operations in one request
// (POST /v1/leases/batch); each result carries its own error. An operation
// of an unknown kind gets its own invalid_argument result, as in the
// stores, instead of failing the whole request at the server's decoder.
func (c *Client) LeaseBatch(ctx context.Context, ops []norn.LeaseOp) ([]norn.LeaseOpResult, error) {
	res := make([]norn.LeaseOpResult, len(ops))
	send := make([]norn.LeaseOp, 0, len(ops))
	at := make([]int, 0, len(ops)) // index in ops of each sent op
	for i := range ops {
		if err := checkRaw(fmt.Sprintf("ops[%d].result", i), ops[i].Result); err != nil {
			return nil, err
		}
		// The server refuses a whole batch with an invalid op; the stores
		// give the op its own error, and so does the client, with the same
		// check.
		if err := ops[i].ValidateInBatch(); err != nil {
			res[i].Err = norn.BatchOpError(i, err)
			continue
		}
		send = append(send, ops[i])
		at = append(at, i)
	}
	if len(send) == 0 && len(ops) > 0 {
		return res, nil
	}
	body, err := wire.AppendLeaseOps(make([]byte, 0, 96*len(send)), send)
	if err != nil {
		return nil, norn.Invalid("", "cannot encode request: %v", err)
	}
	var out wire.LeaseBatchResponse
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/leases/batch", raw: body}, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(send) {
		return nil, &norn.Error{Code: norn.CodeInternal, Message: fmt.Sprintf("server returned %d results for %d lease operations", len(out.Results), len(send))}
	}
	for j, r := range out.Results {
		i := at[j]
		res[i].Deadline = r.Deadline
		if r.Error != nil && r.Error.Code != "" {
			res[i].Err = r.Error.Err()
		}
	}
	return res, nil
}

// Signal sends a signal to a task (POST /v1/tasks/{id}/signals); see
// norn.Signaler.
func (c *Client) Signal(ctx context.Context, id string, s norn.NewSignal) (*norn.Signal, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var out wire.SignalResponse
	if err := c.do(ctx, request{method: http.MethodPost, path: taskPath(id, "/signals"), body: s}, &out); err != nil {
		return nil, err
	}
	return out.Signal, nil
}

// Signals returns a task's signals after a sequence number
// (GET /v1/tasks/{id}/signals?after=N).
func (c *Client) Signals(ctx context.Context, id string, after uint64) ([]norn.Signal, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	var q url.Values
	if after > 0 {
		q = url.Values{"after": {strconv.FormatUint(after, 10)}}
	}
	var out wire.SignalsResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: taskPath(id, "/signals"), query: q}, &out); err != nil {
		return nil, err
	}
	if out.Signals == nil {
		out.Signals = []norn.Signal{}
	}
	return out.Signals, nil
}
