package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// checkRaw rejects a json.RawMessage that is not valid JSON with the error
// a store gives, because encoding/json cannot even put it in the request.
// Size limits are left to the server, which knows its configuration.
func checkRaw(field string, raw json.RawMessage) error {
	if len(raw) > 0 && !json.Valid(raw) {
		return norn.Invalid(field, "is not valid JSON")
	}
	return nil
}

func checkSpecs(prefix string, tasks []norn.NewTask) error {
	for i := range tasks {
		if err := checkRaw(fmt.Sprintf("%s[%d].spec", prefix, i), tasks[i].Spec); err != nil {
			return err
		}
	}
	return nil
}

// Submit stores tasks atomically through POST /v1/tasks/batch; duplicates
// (ids that already existed, unique keys held) come back with Duplicate set.
func (c *Client) Submit(ctx context.Context, tasks ...norn.NewTask) ([]norn.Submitted, error) {
	if tasks == nil {
		tasks = []norn.NewTask{}
	}
	// The stores validate exactly this first; doing it here gives the same
	// errors (fields included) whatever the server's decoder would say,
	// and saves a round trip for a batch that cannot succeed. It also
	// checks that every spec is valid JSON, which appendBatch relies on.
	if err := norn.ValidateBatch("tasks", tasks); err != nil {
		return nil, err
	}
	body, err := wire.AppendBatch(make([]byte, 0, wire.BatchSizeHint(tasks)), tasks)
	if err != nil {
		return nil, norn.Invalid("", "cannot encode request: %v", err)
	}
	var out wire.BatchResponse
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/tasks/batch", raw: body}, &out); err != nil {
		return nil, err
	}
	// "duplicates" lists the returned task's id once per result that
	// created nothing. An id can be returned more than once (a task with
	// the unique key of an earlier one of the batch is a duplicate of it);
	// only its first occurrence can have created it, so of n occurrences
	// of an id listed d times, the last d are the duplicates.
	dups := make(map[string]int, len(out.Duplicates))
	for _, id := range out.Duplicates {
		dups[id]++
	}
	seen := make(map[string]int, len(out.Tasks))
	for _, t := range out.Tasks {
		if t != nil {
			seen[t.ID]++
		}
	}
	subs := make([]norn.Submitted, len(out.Tasks))
	for i, t := range out.Tasks {
		subs[i] = norn.Submitted{Task: t}
		if t == nil {
			continue
		}
		// seen counts down the occurrences left, this one included.
		subs[i].Duplicate = seen[t.ID] <= dups[t.ID]
		seen[t.ID]--
	}
	for _, n := range out.Replaced {
		if n >= 0 && n < len(subs) {
			subs[n].Replaced = true
		}
	}
	return subs, nil
}

// Get returns one task (GET /v1/tasks/{id}).
func (c *Client) Get(ctx context.Context, id string) (*norn.Task, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	var out wire.TaskResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: taskPath(id, "")}, &out); err != nil {
		return nil, err
	}
	return out.Task, nil
}

// GetMany returns the tasks that exist, in request order, and the missing
// ids (GET /v1/tasks/{id1},{id2},…).
func (c *Client) GetMany(ctx context.Context, ids []string) ([]*norn.Task, []string, error) {
	switch len(ids) {
	case 0:
		return []*norn.Task{}, nil, nil
	case 1:
		// The comma route needs two ids; one id is a plain Get.
		t, err := c.Get(ctx, ids[0])
		if err != nil {
			if norn.CodeOf(err) == norn.CodeNotFound {
				return []*norn.Task{}, []string{ids[0]}, nil
			}
			return nil, nil, err
		}
		return []*norn.Task{t}, nil, nil
	}
	for i, id := range ids {
		if err := checkID("ids["+strconv.Itoa(i)+"]", id); err != nil {
			return nil, nil, err
		}
	}
	var out wire.ManyResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: wire.IDsPath(ids)}, &out); err != nil {
		return nil, nil, err
	}
	if out.Tasks == nil {
		out.Tasks = []*norn.Task{}
	}
	return out.Tasks, out.Missing, nil
}

// FilterValues encodes f as the query parameters of GET /v1/tasks,
// /v1/tasks/count and DELETE /v1/tasks. Times keep nanoseconds.
func FilterValues(f norn.Filter) url.Values { return wire.FilterValues(f) }

// checkFilter gives the store's error for a malformed filter (the server
// would name its query parameter instead of the Filter field).
func checkFilter(f norn.Filter) error {
	return f.Validate()
}

// QueryValues encodes q (filter, paging, order and view) for GET /v1/tasks.
func QueryValues(q norn.Query) url.Values { return wire.QueryValues(q) }

// List returns one page of matching tasks (GET /v1/tasks).
func (c *Client) List(ctx context.Context, q norn.Query) (norn.Page, error) {
	if err := checkFilter(q.Filter); err != nil {
		return norn.Page{}, err
	}
	var out norn.Page
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/tasks", query: QueryValues(q)}, &out); err != nil {
		return norn.Page{}, err
	}
	if out.Tasks == nil {
		out.Tasks = []*norn.Task{}
	}
	return out, nil
}

// Count returns how many tasks match f (GET /v1/tasks/count).
func (c *Client) Count(ctx context.Context, f norn.Filter) (int64, error) {
	if err := checkFilter(f); err != nil {
		return 0, err
	}
	var out wire.GroupedCountResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/tasks/count", query: FilterValues(f)}, &out); err != nil {
		return 0, err
	}
	return out.Count, nil
}

// CountGrouped returns counts by queue and status (GET /v1/tasks/count?group=queue,status).
func (c *Client) CountGrouped(ctx context.Context, f norn.Filter) ([]norn.GroupCount, error) {
	if err := checkFilter(f); err != nil {
		return nil, err
	}
	v := wire.GroupedFilterValues(f)
	var out wire.GroupedCountResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/tasks/count", query: v}, &out); err != nil {
		return nil, err
	}
	if out.Groups == nil {
		out.Groups = []norn.GroupCount{}
	}
	return out.Groups, nil
}

// Cancel cancels a task (POST /v1/tasks/{id}/cancel).
func (c *Client) Cancel(ctx context.Context, id string) (*norn.Task, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	var out wire.TaskResponse
	if err := c.do(ctx, request{method: http.MethodPost, path: taskPath(id, "/cancel"), body: wire.Empty{}}, &out); err != nil {
		return nil, err
	}
	return out.Task, nil
}

// Retry runs again an aborted or cancelled task (POST /v1/tasks/{id}/retry)
// and returns it.
func (c *Client) Retry(ctx context.Context, id string, o norn.RetryOptions) (*norn.Task, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	var out wire.TaskResponse
	if err := c.do(ctx, request{method: http.MethodPost, path: taskPath(id, "/retry"), body: wire.RetryRequest(o)}, &out); err != nil {
		return nil, err
	}
	return out.Task, nil
}

// RetryMatching retries every aborted or cancelled task matching a
// non-empty filter (POST /v1/tasks/retry?<filter>) and returns how many.
func (c *Client) RetryMatching(ctx context.Context, f norn.Filter) (int64, error) {
	if err := norn.CheckRetryFilter(&f); err != nil {
		return 0, err
	}
	var out wire.RetriedResponse
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/tasks/retry", query: FilterValues(f), body: wire.Empty{}}, &out); err != nil {
		return 0, err
	}
	return out.Retried, nil
}

// CancelMatching cancels every pending task matching a non-empty filter
// (POST /v1/tasks/cancel?<filter>) and returns how many.
func (c *Client) CancelMatching(ctx context.Context, f norn.Filter) (int64, error) {
	if err := norn.CheckCancelFilter(&f); err != nil {
		return 0, err
	}
	var out wire.CancelledResponse
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/tasks/cancel", query: FilterValues(f), body: wire.Empty{}}, &out); err != nil {
		return 0, err
	}
	return out.Cancelled, nil
}

// Update changes a task that is not running (PATCH /v1/tasks/{id}).
func (c *Client) Update(ctx context.Context, id string, u norn.Update) (*norn.Task, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	var out wire.TaskResponse
	if err := c.do(ctx, request{method: http.MethodPatch, path: taskPath(id, ""), body: wire.FromUpdate(u)}, &out); err != nil {
		return nil, err
	}
	return out.Task, nil
}

// Delete removes one task (DELETE /v1/tasks/{id}).
func (c *Client) Delete(ctx context.Context, id string) error {
	if err := checkID("id", id); err != nil {
		return err
	}
	return c.do(ctx, request{method: http.MethodDelete, path: taskPath(id, "")}, &wire.DeletedResponse{})
}

// DeleteMatching removes every task matching f (DELETE /v1/tasks?filters);
// the server refuses an empty filter.
func (c *Client) DeleteMatching(ctx context.Context, f norn.Filter) (int64, error) {
	if err := checkFilter(f); err != nil {
		return 0, err
	}
	var out wire.DeletedResponse
	if err := c.do(ctx, request{method: http.MethodDelete, path: "/v1/tasks", query: FilterValues(f)}, &out); err != nil {
		return 0, err
	}
	return out.Deleted, nil
}

// ReadLog returns log entries after seq after, at most limit (0 = all).
func (c *Client) ReadLog(ctx context.Context, id string, after uint64, limit int) ([]norn.LogEntry, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	v := wire.LogValues(after, limit)
	var out wire.LogResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: taskPath(id, "/log"), query: v}, &out); err != nil {
		return nil, err
	}
	if out.Entries == nil {
		out.Entries = []norn.LogEntry{}
	}
	return out.Entries, nil
}

// Transact applies a transaction all or nothing (POST /v1/transactions).
func (c *Client) Transact(ctx context.Context, tx norn.Txn) (*norn.TxnResult, error) {
	if err := checkSpecs("submit", tx.Submit); err != nil {
		return nil, err
	}
	if err := norn.ValidateBatch("submit", tx.Submit); err != nil {
		return nil, err
	}
	body := wire.FromTxn(tx)
	var out norn.TxnResult
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/transactions", body: body}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
