package postgres

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// copyColumns are the columns a plain submit writes; the others keep their
// defaults (no dependencies, errors or history, version 1).
var copyColumns = []string{"id", "queue", "spec", "priority", "status", "labels", "created", "updated", "run_at",
	"ready_at", "max_attempts", "retry", "timeout_ns", "concurrency_key", "max_runtime_ns", "traceparent", "tracestate", "fair_key"}

// copyIn inserts new tasks with COPY, PostgreSQL's bulk load: rows go to
// the heap a page at a time with one WAL record per page instead of one per
// row, and no statement is evaluated per row. It serves batches whose ids
// were all generated (UUIDv7: no duplicates to look for) and that have no
// dependencies; eventsOn says whether some node subscribes to events.
func (s *Store) copyIn(ctx context.Context, q querier, recs []*rec, now time.Time, eventsOn bool) error {
	i := 0
	row := make([]any, len(copyColumns))
	_, err := q.CopyFrom(ctx, pgx.Identifier{s.cfg.Schema, "tasks"}, copyColumns, pgx.CopyFromFunc(func() ([]any, error) {
		for i < len(recs) && recs[i] == nil {
			i++
		}
		if i == len(recs) {
			return nil, nil
		}
		r := recs[i]
		i++
		var spec []byte
		if len(r.Spec) > 0 {
			spec = r.Spec
		}
		row[0], row[1], row[2], row[3], row[4] = r.ID, r.Queue, spec, int64(r.Priority), string(r.Status)
		row[5], row[6], row[7], row[8], row[9] = labelsJSON(r.Labels), now, now, r.RunAt, now
		row[10], row[11], row[12] = int32(r.MaxAttempts), retryJSON(r.Retry), int64(r.Timeout)
		row[13], row[14] = strPtr(r.ConcurrencyKey), int64(r.MaxRuntime)
		row[15], row[16] = strPtr(r.Traceparent), strPtr(r.Tracestate)
		row[17] = r.fairKey
		return row, nil
	}))
	if err != nil {
		return err
	}
	// COPY cannot notify; one statement does, after the rows are written.
	// Outside a transaction the rows are committed already: a failure to
	// notify then only delays claimers on other nodes until their next poll,
	// and must not report the stored tasks as not stored.
	var payloads []string
	if eventsOn {
		payloads = submitEvents(recs)
	} else {
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
	_, err = q.Exec(ctx, "SELECT pg_notify($1, p) FROM unnest($2::text[]) p", s.channel, payloads)
	if _, inTx := q.(pgx.Tx); inTx {
		return err
	}
	return nil
}

// submitEvents formats TaskSubmit events as the listener reads them, in
// payloads of at most 20 lines (NOTIFY payloads must stay under 8000 bytes).
func submitEvents(recs []*rec) []string {
	var out []string
	var b strings.Builder
	lines := 0
	for _, r := range recs {
		if r == nil {
			continue
		}
		if lines == 20 {
			out = append(out, b.String())
			b.Reset()
			lines = 0
		}
		if lines > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(string(norn.EventSubmitted) + "\t" + r.ID + "\t" + r.Queue + "\t" + string(r.Status) + "\t1\t" +
			strconv.FormatInt(r.Created.UnixMicro(), 10))
		lines++
	}
	if lines > 0 {
		out = append(out, b.String())
	}
	return out
}
