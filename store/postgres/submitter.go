package postgres

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nornq/norn"
)

// maxMergedSubmit caps the tasks of one merged COPY. A single caller's
// batch larger than this goes out alone.
const maxMergedSubmit = 5000

// submitter merges the plain submits of concurrent callers (generated ids,
// no dependencies, no unique keys) into one COPY, as the completer merges
// completions. Each caller reads the clock and its queues' settings,
// decides its tasks' first states and encodes its rows itself (in
// parallel), then queues the rows and waits; one flush at a time writes
// what is queued with one COPY (one commit) and one notification, and
// batches queued while it sends join it, up to maxMergedSubmit rows. An
// idle store sends a batch at once.
//
// Why: a COPY costs the database much more per row when it is short. With
// four callers of 1,000 tasks each on 2 cores, their concurrent COPYs of
// 1,000 rows cost 16–19 µs of database CPU per task, and one COPY of 4,000
// rows 7.5 µs; the profile of the short ones is dominated by per-statement
// work (making a tuple slot per buffered row, the backend growing its heap
// and giving the memory back after every statement, a commit each).
type submitter struct {
	mu    sync.Mutex
	queue []*submitReq
	busy  bool // a flush runs
}

// submitReq is one caller's batch, decided and encoded.
type submitReq struct {
	recs   []*rec
	rows   []byte // recs in COPY's binary format
	events eventLevel
	// batches are the ready rows of recs (batches.go), or nil.
	batches *readyRows
	// Set by the flush before ready is closed.
	err   error
	ready chan struct{}
}

// rowBufs holds encoding buffers for reuse: a batch of 1,000 tasks with
// 200-byte specs is about 400 kB, which would otherwise be garbage after
// every submit.
var rowBufs sync.Pool

// mergeable reports whether a validated batch can go through the
// submitter: only generated ids (nothing to look for), no dependencies (no
// locks to take) and no unique keys (no per-key serialization).
func mergeable(tasks []norn.NewTask) bool {
	for i := range tasks {
		if tasks[i].ID != "" || len(tasks[i].DependsOn) > 0 || tasks[i].UniqueKey != "" || tasks[i].Batch != "" || tasks[i].OnDependencyFailure != "" || tasks[i].SequenceKey != "" {
			return false
		}
	}
	return true
}

// submitMerged submits a mergeable batch, merged with what other callers
// submit meanwhile. The caller reads the clock and the queue settings,
// decides and encodes its rows itself, so that work runs in parallel across
// callers; only the COPY is merged. It returns when the batch is committed
// or failed. A caller whose context ends while its batch is still queued
// takes it out: nothing of it is stored.
func (s *Store) submitMerged(ctx context.Context, tasks []norn.NewTask) ([]norn.Submitted, error) {
	p, err := newSubmitPlan("tasks", norn.WithTrace(ctx, tasks))
	if err != nil {
		return nil, mapErr(err)
	}
	var batches *readyRows
	err = s.withConn(ctx, func(conn *pgx.Conn) error {
		if err := s.readForSubmit(ctx, conn, p); err != nil {
			return err
		}
		if err := p.decide(); err != nil {
			return err
		}
		batches, err = s.batchReady(ctx, conn, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	buf, _ := rowBufs.Get().(*[]byte)
	if buf == nil {
		buf = new([]byte)
	}
	*buf = appendCopyRows((*buf)[:0], p.recs, p.now)
	req := &submitReq{recs: p.recs, rows: *buf, events: p.events, ready: make(chan struct{})}
	req.batches = batches
	sub := &s.submitter
	sub.mu.Lock()
	sub.queue = append(sub.queue, req)
	if !sub.busy {
		sub.busy = true
		sub.mu.Unlock()
		// The flush runs under the store's context: a caller whose context
		// ends must not fail the others' batches.
		go s.flushSubmitsAll()
	} else {
		sub.mu.Unlock()
	}
	select {
	case <-req.ready:
		rowBufs.Put(buf)
		if req.err != nil {
			return nil, req.err
		}
	case <-ctx.Done():
		sub.mu.Lock()
		i := slices.Index(sub.queue, req)
		if i >= 0 {
			sub.queue = slices.Delete(sub.queue, i, i+1)
			rowBufs.Put(buf)
		}
		sub.mu.Unlock()
		// Taken by a flush already: the batch may still be committed; the
		// caller is not told it was, as with any call interrupted in flight.
		return nil, ctx.Err()
	}
	out := make([]norn.Submitted, len(p.recs))
	for i, r := range p.recs {
		out[i] = norn.Submitted{Task: r.task()}
	}
	return out, nil
}

// flushSubmitsAll flushes until the queue is empty.
func (s *Store) flushSubmitsAll() {
	sub := &s.submitter
	for {
		first := sub.take(maxMergedSubmit, true)
		if first == nil {
			sub.mu.Lock()
			if len(sub.queue) == 0 {
				sub.busy = false
				sub.mu.Unlock()
				return
			}
			sub.mu.Unlock()
			continue
		}
		s.flushSubmits(&copyStream{sub: sub, batch: []*submitReq{first}, n: len(first.recs), more: true})
	}
}

// take takes the oldest queued request if it has at most room rows (any
// size when first), or returns nil.
func (sub *submitter) take(room int, first bool) *submitReq {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if len(sub.queue) == 0 || (!first && len(sub.queue[0].recs) > room) {
		return nil
	}
	r := sub.queue[0]
	sub.queue = slices.Delete(sub.queue, 0, 1)
	return r
}

// copyStream is the data of one merged COPY. It sends its requests' rows
// and then, while it may take more, requests queued meanwhile, up to
// maxMergedSubmit rows: pgconn reads it as it sends, so a batch that
// arrives while the COPY is still being sent joins it instead of waiting
// for the next one.
type copyStream struct {
	sub   *submitter
	batch []*submitReq
	n     int  // rows in batch
	more  bool // may take more requests; false once it stopped streaming
	next  int  // the request to send next
	cur   []byte
	state int // 0: header next, 1: rows, 2: trailer sent
}

func (c *copyStream) Read(p []byte) (int, error) {
	for len(c.cur) == 0 {
		switch c.state {
		case 0:
			c.cur, c.state = copyHeader, 1
		case 1:
			if c.next < len(c.batch) {
				c.cur = c.batch[c.next].rows
				c.next++
				continue
			}
			if c.more {
				if r := c.sub.take(maxMergedSubmit-c.n, false); r != nil {
					c.batch = append(c.batch, r)
					c.n += len(r.recs)
					continue
				}
				c.more = false
			}
			c.cur, c.state = copyTrailer, 2
		default:
			return 0, io.EOF
		}
	}
	n := copy(p, c.cur)
	c.cur = c.cur[n:]
	return n, nil
}

// flushSubmits writes the stream's requests with one COPY and one
// notification and answers each request. When the merged statement fails
// on its data (a row the database refuses), each request is written again
// on its own, so a bad row fails only the caller that sent it.
func (s *Store) flushSubmits(c *copyStream) {
	err := s.withConn(s.ctx, func(conn *pgx.Conn) error {
		// A retry sends the same requests again, and no more.
		c.next, c.state, c.cur = 0, 0, nil
		if s.cfg.submitPause != nil {
			s.cfg.submitPause(len(c.batch))
		}
		return s.flushBatched(conn, c)
	})
	if err != nil && len(c.batch) > 1 && dataError(err) {
		for _, r := range c.batch {
			s.flushSubmits(&copyStream{sub: c.sub, batch: []*submitReq{r}, n: len(r.recs)})
		}
		return
	}
	if err != nil && s.ctx.Err() != nil {
		err = norn.ErrClosed
	}
	for _, r := range c.batch {
		r.err = err
		close(r.ready)
	}
}

// recs are the stream's rows, and the events its callers ask for.
func (c *copyStream) recs() ([]*rec, eventLevel) {
	var recs []*rec
	events := eventsOff
	for _, r := range c.batch {
		recs = append(recs, r.recs...)
		events = max(events, r.events)
	}
	return recs, events
}

// flushBatched is the flush when ready rows are on: the COPY and the ready
// rows of the requests it took are one transaction, so no task is ever
// stored naming a ready row that is not.
func (s *Store) flushBatched(conn *pgx.Conn, c *copyStream) error {
	tx, err := conn.Begin(s.ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(s.ctx)
	err = s.copyRows(s.ctx, tx, c)
	c.more = false
	if err != nil {
		return err
	}
	rows := &readyRows{}
	for _, r := range c.batch {
		if r.batches != nil {
			rows.add(r.batches)
		}
	}
	if rows.len() > 0 {
		if err := s.writeReady(s.ctx, tx, rows); err != nil {
			return err
		}
	}
	recs, events := c.recs()
	if err := s.notifySubmitted(s.ctx, tx, recs, events); err != nil {
		return err
	}
	return tx.Commit(s.ctx)
}

// dataError reports whether err is the database refusing a value (SQLSTATE
// classes 22, data exception, and 23, integrity constraint violation).
func dataError(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return strings.HasPrefix(pe.Code, "22") || strings.HasPrefix(pe.Code, "23")
	}
	return false
}
