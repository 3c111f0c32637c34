package postgres

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Signals (norn.Signal) are rows of {s}.signals; the task's row counts
// them (signal_count) and keeps its last wait (signal_wait). A signal and
// a snooze until a signal both lock the task's row first, so one is
// decided after the other: a signal sent before the wait is found by it,
// one sent after finds the wait.

// pgSignal is a signal as signalsAgg renders it (data in base64).
type pgSignal struct {
	Seq  uint64    `json:"seq"`
	Name string    `json:"name"`
	Data string    `json:"data"`
	Time time.Time `json:"time"`
}

func (p pgSignal) signal() (norn.Signal, error) {
	sg := norn.Signal{Seq: p.Seq, Name: p.Name, Time: p.Time.UTC()}
	if p.Data != "" {
		b, err := base64.StdEncoding.DecodeString(p.Data)
		if err != nil {
			return sg, err
		}
		sg.Data = b
	}
	return sg, nil
}

// readSignals fills r's signals and signal wait from the columns read.
func (d *recReader) readSignals(r *rec) error {
	if len(d.sigWait.b) > 0 {
		r.SignalWait = new(norn.SignalWait)
		if err := json.Unmarshal(d.sigWait.b, r.SignalWait); err != nil {
			return fmt.Errorf("task %q signal wait: %w", r.ID, err)
		}
		r.SignalWait.Until = r.SignalWait.Until.UTC()
	}
	if len(d.sigs.b) > 0 {
		var ps []pgSignal
		if err := json.Unmarshal(d.sigs.b, &ps); err != nil {
			return fmt.Errorf("task %q signals: %w", r.ID, err)
		}
		for _, p := range ps {
			sg, err := p.signal()
			if err != nil {
				return fmt.Errorf("task %q signal %d: %w", r.ID, p.Seq, err)
			}
			r.Signals = append(r.Signals, sg)
		}
	}
	return nil
}

// Signal appends a signal to a task; see norn.Signaler.
func (s *Store) Signal(ctx context.Context, id string, ns norn.NewSignal) (*norn.Signal, error) {
	if err := norn.ValidateID("id", id); err != nil {
		return nil, err
	}
	if err := ns.Validate(); err != nil {
		return nil, err
	}
	var out *norn.Signal
	woke := false
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		woke = false
		b := &pgx.Batch{}
		s.queueDetach(b, []string{id})
		var (
			st   string
			n    int
			wait []byte
		)
		b.Queue(s.q(`SELECT status, signal_count, signal_wait FROM {s}.tasks WHERE id = $1 FOR UPDATE`), id).QueryRow(func(row pgx.Row) error {
			if err := row.Scan(&st, &n, &wait); err != pgx.ErrNoRows {
				return err
			}
			return norn.NotFound(id)
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if err := norn.CheckSignal(id, norn.Status(st), uint64(n)); err != nil {
			return err
		}
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		out = &norn.Signal{Seq: uint64(n) + 1, Name: ns.Name, Data: ns.Data, Time: micro(now)}
		var w *norn.SignalWait
		if len(wait) > 0 {
			w = new(norn.SignalWait)
			if err := json.Unmarshal(wait, w); err != nil {
				return err
			}
		}
		wakes := w != nil && w.Name == ns.Name && !w.Received
		var newWait *string
		if wakes {
			w.Received = true
			j, _ := json.Marshal(w)
			sw := string(j)
			newWait = &sw
			woke = st == string(norn.StatusScheduled)
		}
		_, err = tx.Exec(ctx, s.q(`WITH g AS (INSERT INTO {s}.signals (task_id, seq, name, data, time) VALUES ($1, $2, $3, $4, $5)),
upd AS (UPDATE {s}.tasks t SET signal_count = t.signal_count + 1, signal_wait = coalesce($6::jsonb, t.signal_wait),
	status = CASE WHEN $7 THEN 'ready' ELSE t.status END,
	run_at = CASE WHEN $7 THEN $5 ELSE t.run_at END, ready_at = CASE WHEN $7 THEN $5 ELSE t.ready_at END,
	updated = CASE WHEN $7 THEN $5 ELSE t.updated END, version = t.version + CASE WHEN $7 THEN 1 ELSE 0 END,
	history_count = t.history_count + CASE WHEN $7 THEN 1 ELSE 0 END
	WHERE t.id = $1
	RETURNING t.id, t.queue, t.status, t.version, t.history_count, CASE WHEN $7 THEN 'TaskRelease' ELSE '' END AS kind, t.updated AS time),
h AS (INSERT INTO {s}.task_history_rows (task_id, seq, type, time) SELECT id, history_count, kind, time FROM upd WHERE kind <> '')`+
			s.eventsCTE("upd")+`
SELECT count(*) FROM upd, nt`), id, int(out.Seq), ns.Name, nilBytes(ns.Data), out.Time, newWait, woke)
		return err
	})
	if err != nil {
		return nil, mapErr(err)
	}
	if woke {
		s.wake.fire()
	}
	return out, nil
}

// Signals returns a task's signals after a sequence number.
func (s *Store) Signals(ctx context.Context, id string, after uint64) ([]norn.Signal, error) {
	if err := norn.ValidateID("id", id); err != nil {
		return nil, err
	}
	out := []norn.Signal{}
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = out[:0]
		var exists bool
		if err := conn.QueryRow(ctx, s.q(`SELECT EXISTS (SELECT 1 FROM {s}.tasks WHERE id = $1)`), id).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return norn.NotFound(id)
		}
		rows, err := conn.Query(ctx, s.q(`SELECT seq, name, data, time FROM {s}.signals WHERE task_id = $1 AND seq > $2 ORDER BY seq`), id, int64(after))
		if err != nil {
			return err
		}
		var sg norn.Signal
		var seq int64
		_, err = pgx.ForEachRow(rows, []any{&seq, &sg.Name, &sg.Data, &sg.Time}, func() error {
			c := sg
			c.Seq, c.Time = uint64(seq), sg.Time.UTC()
			c.Data = append([]byte(nil), sg.Data...)
			if len(c.Data) == 0 {
				c.Data = nil
			}
			out = append(out, c)
			return nil
		})
		return err
	})
	return out, mapErr(err)
}

// snoozeUntilSignal is Snooze with an UntilSignal: the task's row locked,
// its signals looked at, then the row written as norn.AfterSignalWait
// decides, in one transaction with the signal's lock order.
func (s *Store) snoozeUntilSignal(ctx context.Context, ref norn.LeaseRef, sn norn.Snooze) error {
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		s.queueDetach(b, []string{ref.TaskID})
		recs, err := s.readAfter(ctx, tx, b, s.q(`SELECT `+colsCore+` FROM {s}.tasks t WHERE t.id = ANY($1) FOR UPDATE`), []string{ref.TaskID})
		if err != nil {
			return err
		}
		r := recs[ref.TaskID]
		if err := checkLease(r, ref); err != nil {
			return err
		}
		var received bool
		if err := tx.QueryRow(ctx, s.q(`SELECT EXISTS (SELECT 1 FROM {s}.signals WHERE task_id = $1 AND name = $2)`), r.ID, sn.UntilSignal).Scan(&received); err != nil {
			return err
		}
		now, err := s.dbNow(ctx, tx)
		if err != nil {
			return err
		}
		now = micro(now)
		o, w := norn.AfterSignalWait(now, sn, received)
		w.Until = micro(w.Until)
		j, _ := json.Marshal(w)
		_, err = tx.Exec(ctx, s.q(`WITH upd AS (UPDATE {s}.tasks t SET status = $2, run_at = $3, ready_at = CASE WHEN $2 = 'ready' THEN $4 ELSE t.ready_at END,
	signal_wait = $5::jsonb, attempts = greatest(t.attempts - 1, 0), deadline = NULL, progress = 0, updated = $4,
	version = t.version + 1, history_count = t.history_count + 1
	WHERE t.id = $1
	RETURNING t.id, t.queue, t.status, t.version, t.history_count, 'TaskSnooze'::text AS kind, t.updated AS time),
h AS (INSERT INTO {s}.task_history_rows (task_id, seq, type, time, worker, lease) SELECT id, history_count, kind, time, $6, $7 FROM upd)`+
			s.eventsCTE("upd")+`
SELECT count(*) FROM upd, nt`), r.ID, string(o.Status), micro(o.RunAt), now, string(j), ref.Worker, int64(ref.Lease))
		return err
	})
	if err != nil {
		return mapErr(err)
	}
	s.sweepWake.fire()
	s.wake.fire()
	return nil
}
