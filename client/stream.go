package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/wire"
)

// Stream iterates over every task matching q (q.Limit caps the total, 0 =
// all) by reading GET /v1/tasks as NDJSON one line at a time, so memory stays
// constant however many tasks match. Close stops the request.
func (c *Client) Stream(ctx context.Context, q norn.Query) (norn.TaskIterator, error) {
	if err := checkFilter(q.Filter); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	resp, err := c.send(ctx, c.withTimeoutAtLeast(0), request{
		method: http.MethodGet, path: "/v1/tasks", query: QueryValues(q), accept: "application/x-ndjson",
	})
	if err != nil {
		cancel()
		return nil, err
	}
	return &taskIter{ctx: ctx, cancel: cancel, body: resp.Body, dec: json.NewDecoder(bufio.NewReaderSize(resp.Body, 64<<10))}, nil
}

type taskIter struct {
	ctx    context.Context
	cancel context.CancelFunc
	body   io.ReadCloser
	dec    *json.Decoder
	cur    *norn.Task
	err    error
	done   bool
	closed atomic.Bool
}

// Next decodes the next line; false at the end, on error or after Close.
func (it *taskIter) Next() bool {
	if it.done {
		return false
	}
	var line wire.StreamLine
	err := it.dec.Decode(&line)
	switch {
	case err == io.EOF:
		it.finish(nil)
		return false
	case err != nil:
		if it.closed.Load() {
			it.finish(nil)
		} else {
			var se *json.SyntaxError
			if errors.As(err, &se) {
				it.finish(&norn.Error{Code: norn.CodeInternal, Message: "cannot decode streamed task", Err: err})
			} else {
				it.finish(transportError(err))
			}
		}
		return false
	case line.Error != nil:
		it.finish(line.Error.Err())
		return false
	}
	t := line.Task
	it.cur = &t
	return true
}

func (it *taskIter) finish(err error) {
	it.done, it.err, it.cur = true, err, nil
	it.Close()
}

// Item returns the current task.
func (it *taskIter) Item() *norn.Task { return it.cur }

// Err returns the error that stopped iteration (nil at a clean end or after Close).
func (it *taskIter) Err() error { return it.err }

// Close aborts the request; safe to call more than once and concurrently with Next.
func (it *taskIter) Close() error {
	if it.closed.Swap(true) {
		return nil
	}
	it.cancel()
	return it.body.Close()
}

// Subscribe follows task state changes matching f over server-sent events
// (GET /v1/events). It returns once the server has accepted the
// subscription; Next blocks until an event arrives, and Close ends it.
func (c *Client) Subscribe(ctx context.Context, f norn.EventFilter) (norn.EventStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	v := wire.EventFilterValues(f)
	resp, err := c.send(ctx, c.withTimeoutAtLeast(0), request{
		method: http.MethodGet, path: "/v1/events", query: v, accept: "text/event-stream",
	})
	if err != nil {
		cancel()
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	return &eventIter{ctx: ctx, cancel: cancel, body: resp.Body, sc: sc}, nil
}

type eventIter struct {
	ctx    context.Context
	cancel context.CancelFunc
	body   io.ReadCloser
	sc     *bufio.Scanner
	cur    norn.Event
	err    error
	done   bool
	closed atomic.Bool
}

// Next blocks until the next event; false when the stream ends, the
// context is cancelled or Close is called.
func (it *eventIter) Next() bool {
	if it.done {
		return false
	}
	ev, err := readSSE(it.sc)
	if err != nil {
		switch {
		case it.closed.Load():
			err = nil
		case it.ctx.Err() != nil:
			err = transportError(it.ctx.Err())
		case err == io.EOF:
			err = transportError(io.ErrUnexpectedEOF)
		default:
			err = transportError(err)
		}
		it.done, it.err = true, err
		it.Close()
		return false
	}
	it.cur = ev
	return true
}

// Item returns the current event.
func (it *eventIter) Item() norn.Event { return it.cur }

// Err returns why the stream ended (nil after Close).
func (it *eventIter) Err() error { return it.err }

// Close ends the subscription; safe to call more than once and from another
// goroutine while Next blocks.
func (it *eventIter) Close() error {
	if it.closed.Swap(true) {
		return nil
	}
	it.cancel()
	return it.body.Close()
}

// errBadEvent marks an SSE data payload that is not an event.
var errBadEvent = errors.New("malformed event data")

// readSSE reads lines until one complete event (a blank line after at least
// one data line). Comment lines (": ping") and unknown fields are skipped,
// as the SSE specification says.
func readSSE(sc *bufio.Scanner) (norn.Event, error) {
	var kind string
	var data strings.Builder
	hasData := false
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		if line == "" {
			if !hasData {
				kind = ""
				continue
			}
			var ev norn.Event
			if err := json.Unmarshal([]byte(data.String()), &ev); err != nil {
				return norn.Event{}, errors.Join(errBadEvent, err)
			}
			if ev.Kind == "" {
				ev.Kind = norn.EventKind(kind)
			}
			return ev, nil
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			kind = value
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		}
	}
	if err := sc.Err(); err != nil {
		return norn.Event{}, err
	}
	return norn.Event{}, io.EOF
}
