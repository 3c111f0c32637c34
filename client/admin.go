package client

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// Queues lists queues with counts (GET /v1/queues).
func (c *Client) Queues(ctx context.Context) ([]norn.QueueInfo, error) {
	var out wire.QueuesResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/queues"}, &out); err != nil {
		return nil, err
	}
	if out.Queues == nil {
		out.Queues = []norn.QueueInfo{}
	}
	return out.Queues, nil
}

func queuePath(name string) (string, error) {
	if err := norn.ValidateQueue("queue", name); err != nil {
		return "", err
	}
	return "/v1/queues/" + url.PathEscape(name), nil
}

// Queue returns one queue (GET /v1/queues/{queue}).
func (c *Client) Queue(ctx context.Context, name string) (norn.QueueInfo, error) {
	p, err := queuePath(name)
	if err != nil {
		return norn.QueueInfo{}, err
	}
	var out wire.QueueResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: p}, &out); err != nil {
		return norn.QueueInfo{}, err
	}
	return out.Queue, nil
}

// Sequence reads a sequence's state (GET
// /v1/queues/{queue}/sequences/{key}).
func (c *Client) Sequence(ctx context.Context, queue, key string) (norn.SequenceInfo, error) {
	p, err := queuePath(queue)
	if err != nil {
		return norn.SequenceInfo{}, err
	}
	if err := norn.ValidateSequenceKey("key", key); err != nil {
		return norn.SequenceInfo{}, err
	}
	var out wire.SequenceResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: p + "/sequences/" + url.PathEscape(key)}, &out); err != nil {
		return norn.SequenceInfo{}, err
	}
	return out.Sequence, nil
}

// Sequences lists a queue's sequences with a head (GET
// /v1/queues/{queue}/sequences).
func (c *Client) Sequences(ctx context.Context, queue string, q norn.SequenceQuery) ([]norn.SequenceInfo, error) {
	p, err := queuePath(queue)
	if err != nil {
		return nil, err
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	var out wire.SequencesResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: p + "/sequences", query: wire.SequenceQueryValues(q)}, &out); err != nil {
		return nil, err
	}
	if out.Sequences == nil {
		out.Sequences = []norn.SequenceInfo{}
	}
	return out.Sequences, nil
}

// UpdateQueue pauses/resumes a queue or changes its defaults
// (PATCH /v1/queues/{queue}; admin role).
func (c *Client) UpdateQueue(ctx context.Context, name string, u norn.QueueUpdate) (norn.QueueInfo, error) {
	p, err := queuePath(name)
	if err != nil {
		return norn.QueueInfo{}, err
	}
	var out wire.QueueResponse
	// Every nested setting u carries is named whole, so it replaces the
	// queue's as it does in process (a PATCH keeps unnamed members).
	if err := c.do(ctx, request{method: http.MethodPatch, path: p, body: wire.FromQueueUpdate(u)}, &out); err != nil {
		return norn.QueueInfo{}, err
	}
	return out.Queue, nil
}

// Workers lists registered workers (GET /v1/workers).
func (c *Client) Workers(ctx context.Context) ([]norn.WorkerInfo, error) {
	var out wire.WorkersResponse
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/workers"}, &out); err != nil {
		return nil, err
	}
	if out.Workers == nil {
		out.Workers = []norn.WorkerInfo{}
	}
	return out.Workers, nil
}

// Stats returns counts by queue×status and totals (GET /v1/stats).
func (c *Client) Stats(ctx context.Context) (norn.Stats, error) {
	var out norn.Stats
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/stats"}, &out); err != nil {
		return norn.Stats{}, err
	}
	return out, nil
}

// Throughput returns the server's per-minute history of submitted,
// completed and failed tasks from since (zero: the whole window of
// norn.ThroughputWindow) for the given queues summed (none: all), as GET
// /v1/stats/throughput describes it.
func (c *Client) Throughput(ctx context.Context, since time.Time, queues ...string) (norn.Throughput, error) {
	var out norn.Throughput
	req := request{method: http.MethodGet, path: "/v1/stats/throughput", query: wire.ThroughputValues(queues, since)}
	if err := c.do(ctx, req, &out); err != nil {
		return norn.Throughput{}, err
	}
	return out, nil
}

// Sweep runs the monitor duties due now (POST /v1/sweep; admin role).
func (c *Client) Sweep(ctx context.Context) (norn.SweepReport, error) {
	var out norn.SweepReport
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/sweep"}, &out); err != nil {
		return norn.SweepReport{}, err
	}
	return out, nil
}
