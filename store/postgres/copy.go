package postgres

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nornq/norn"
)

// copyColumns are the columns a plain submit writes; the others keep their
// defaults (no dependencies, errors or history, version 1). appendCopyRow
// writes them in COPY's binary format, so it must follow their types: a
// type changed by a migration makes every plain submit fail until it does.
var copyColumns = []string{"id", "queue", "spec", "priority", "status", "labels", "created", "updated", "run_at",
	"ready_at", "max_attempts", "retry", "timeout_ns", "concurrency_key", "max_runtime_ns", "traceparent", "tracestate", "fair_key", "ready_batch", "expires_at"}

// copyHeader starts a binary COPY stream: the signature, no flags, no
// header extension.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// copyTrailer ends it (a field count of -1).
var copyTrailer = []byte{0xff, 0xff}

// pgEpochMicros is 2000-01-01 UTC, PostgreSQL's timestamp epoch, in Unix
// microseconds.
const pgEpochMicros = 946_684_800_000_000

// appendCopyRows appends the rows of recs (nil entries skipped) in COPY's
// binary format, without header or trailer. Encoding by hand instead of
// through pgx's CopyFrom saves the per-value type dispatch of []any rows,
// and lets a caller encode its batch before it joins a merged COPY.
func appendCopyRows(b []byte, recs []*rec, now time.Time) []byte {
	size := 0
	for _, r := range recs {
		if r != nil {
			// The fixed part: field count, 20 lengths, 7 int64s and an int32;
			// labels and retry policies are rare and may grow the buffer.
			size += 2 + 4*len(copyColumns) + 7*8 + 4 + len(r.ID) + len(r.Queue) + len(r.Spec) + len(r.Status) +
				len(r.ConcurrencyKey) + len(r.Traceparent) + len(r.Tracestate)
			if r.fairKey != nil {
				size += len(*r.fairKey)
			}
		}
	}
	b = slices.Grow(b, size)
	ts := now.UnixMicro() - pgEpochMicros
	for _, r := range recs {
		if r == nil {
			continue
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(copyColumns)))
		b = copyText(b, r.ID)
		b = copyText(b, r.Queue)
		if len(r.Spec) > 0 {
			b = copyBytes(b, r.Spec)
		} else {
			b = copyNull(b)
		}
		b = copyInt64(b, int64(r.Priority))
		b = copyText(b, string(r.Status))
		b = copyJSONB(b, labelsJSON(r.Labels))
		b = copyInt64(b, ts)
		b = copyInt64(b, ts)
		b = copyInt64(b, r.RunAt.UnixMicro()-pgEpochMicros)
		b = copyInt64(b, ts)
		b = binary.BigEndian.AppendUint32(b, 4)
		b = binary.BigEndian.AppendUint32(b, uint32(int32(r.MaxAttempts)))
		b = copyJSONB(b, retryJSON(r.Retry))
		b = copyInt64(b, int64(r.Timeout))
		b = copyOptText(b, r.ConcurrencyKey)
		b = copyInt64(b, int64(r.MaxRuntime))
		b = copyOptText(b, r.Traceparent)
		b = copyOptText(b, r.Tracestate)
		if r.fairKey != nil {
			b = copyText(b, *r.fairKey)
		} else {
			b = copyNull(b)
		}
		if r.batch != 0 {
			b = copyInt64(b, r.batch)
		} else {
			b = copyNull(b)
		}
		if !r.ExpiresAt.IsZero() {
			b = copyInt64(b, r.ExpiresAt.UnixMicro()-pgEpochMicros)
		} else {
			b = copyNull(b)
		}
	}
	return b
}

func copyNull(b []byte) []byte { return binary.BigEndian.AppendUint32(b, 0xffffffff) }

func copyText(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// copyOptText writes "" as NULL.
func copyOptText(b []byte, s string) []byte {
	if s == "" {
		return copyNull(b)
	}
	return copyText(b, s)
}

func copyBytes(b []byte, v []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

func copyInt64(b []byte, v int64) []byte {
	b = binary.BigEndian.AppendUint32(b, 8)
	return binary.BigEndian.AppendUint64(b, uint64(v))
}

// copyJSONB writes a jsonb value: format version 1, then the text.
func copyJSONB(b []byte, s *string) []byte {
	if s == nil {
		return copyNull(b)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(*s)+1))
	b = append(b, 1)
	return append(b, *s...)
}

// copyRows writes rows in COPY's binary format (header to trailer) into
// the tasks table with one COPY on q's connection.
func (s *Store) copyRows(ctx context.Context, q querier, rows io.Reader) error {
	var pc *pgconn.PgConn
	switch c := q.(type) {
	case *pgx.Conn:
		pc = c.PgConn()
	case pgx.Tx:
		pc = c.Conn().PgConn()
	}
	_, err := pc.CopyFrom(ctx, rows, "COPY "+pgx.Identifier{s.cfg.Schema, "tasks"}.Sanitize()+
		" ("+strings.Join(copyColumns, ", ")+") FROM STDIN BINARY")
	return err
}

// copyIn inserts new tasks with COPY, PostgreSQL's bulk load: rows go to
// the heap a page at a time with one WAL record per page instead of one per
// row, and no statement is evaluated per row. It serves batches whose ids
// were all generated (UUIDv7: no duplicates to look for) and that have no
// dependencies; events is what the nodes' subscribers ask for.
func (s *Store) copyIn(ctx context.Context, q querier, recs []*rec, now time.Time, events eventLevel) error {
	rows := io.MultiReader(bytes.NewReader(copyHeader), bytes.NewReader(appendCopyRows(nil, recs, now)),
		bytes.NewReader(copyTrailer))
	if err := s.copyRows(ctx, q, rows); err != nil {
		return err
	}
	return s.notifySubmitted(ctx, q, recs, events)
}

// notifySubmitted tells the other nodes about tasks just written by COPY,
// which cannot notify: their TaskSubmit events (one line per task, or per
// queue and status when every subscriber only counts), otherwise the
// wake-up words. Outside a transaction the rows are committed already: a
// failure to notify then only delays claimers on other nodes until their
// next poll, and must not report the stored tasks as not stored.
func (s *Store) notifySubmitted(ctx context.Context, q querier, recs []*rec, events eventLevel) error {
	var payloads []string
	switch events {
	case eventsAll:
		payloads = submitEvents(recs)
	case eventsCounted:
		payloads = submitCounts(recs)
	default:
		ready, sched := false, false
		for _, r := range recs {
			ready = ready || (r != nil && r.Status == norn.StatusReady)
			sched = sched || (r != nil && r.Status == norn.StatusScheduled)
		}
		if ready {
			payloads = append(payloads, "wake")
		}
		if sched {
			payloads = append(payloads, "sched")
		}
	}
	if len(payloads) == 0 {
		return nil
	}
	_, err := q.Exec(ctx, "SELECT pg_notify($1, p) FROM unnest($2::text[]) p", s.channel, payloads)
	if _, inTx := q.(pgx.Tx); inTx {
		return err
	}
	return nil
}

// submitEvents formats TaskSubmit events as the listener reads them, in
// payloads of at most 20 lines (NOTIFY payloads must stay under 8000 bytes).
func submitEvents(recs []*rec) []string {
	var lines []string
	for _, r := range recs {
		if r != nil {
			lines = append(lines, eventLine(norn.EventSubmitted, r.ID, r.Queue, r.Status, 1, r.Created))
		}
	}
	return eventPayloads(lines)
}

// submitCounts formats recs as counted TaskSubmit events: one line per
// queue and status, in the order they first appear.
func submitCounts(recs []*rec) []string {
	type group struct {
		queue  string
		status norn.Status
	}
	type tally struct {
		n    uint64
		last time.Time
	}
	var order []group
	counts := map[group]*tally{}
	for _, r := range recs {
		if r == nil {
			continue
		}
		g := group{r.Queue, r.Status}
		c := counts[g]
		if c == nil {
			c = &tally{}
			counts[g] = c
			order = append(order, g)
		}
		c.n++
		if r.Created.After(c.last) {
			c.last = r.Created
		}
	}
	lines := make([]string, len(order))
	for i, g := range order {
		lines[i] = eventLine(norn.EventSubmitted, "", g.queue, g.status, counts[g].n, counts[g].last)
	}
	return eventPayloads(lines)
}

// eventLine is one line of an event payload as dispatch reads it; an empty
// id makes it a counted event, version its count.
func eventLine(kind norn.EventKind, id, queue string, status norn.Status, version uint64, at time.Time) string {
	return string(kind) + "\t" + id + "\t" + queue + "\t" + string(status) + "\t" +
		strconv.FormatUint(version, 10) + "\t" + strconv.FormatInt(at.UnixMicro(), 10)
}

// eventPayloads joins lines into payloads of at most 20 lines each.
func eventPayloads(lines []string) []string {
	var out []string
	for len(lines) > 0 {
		n := min(len(lines), 20)
		out = append(out, strings.Join(lines[:n], "\n"))
		lines = lines[n:]
	}
	return out
}
