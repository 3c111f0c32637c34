package postgres

import (
	"context"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/nornq/norn"
)

// Sequences (norn.SequenceInfo): a submit locks the sequences' rows
// (seqLockSQL) and decides which new member is the head and which wait
// (blocked, numbered in submit order); the hand-over when a head ends is
// the tasks_sequence_* triggers' (migrations/0001_baseline.up.sql), so
// every path that ends or deletes a task does it in its own transaction
// without knowing about sequences.

// seqState is a sequence as a submit finds and leaves it.
type seqState struct {
	head string
	next int64
}

// seqRefs lists the batch's distinct sequences, sorted (the order their
// rows are locked in, so submitters cannot deadlock).
func (p *submitPlan) seqRefs() []norn.UniqueRef {
	var refs []norn.UniqueRef
	for i := range p.tasks {
		if k := p.tasks[i].SequenceKey; k != "" {
			r := norn.UniqueRef{Queue: p.tasks[i].Queue, Key: k}
			if !slices.Contains(refs, r) {
				refs = append(refs, r)
			}
		}
	}
	slices.SortFunc(refs, func(a, b norn.UniqueRef) int {
		if c := strings.Compare(a.Queue, b.Queue); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return refs
}

// queueSeqLock queues the upsert that creates and locks the batch's
// sequences' rows until commit and reads their heads and next numbers
// into p.seqs.
func (s *Store) queueSeqLock(b *pgx.Batch, p *submitPlan, refs []norn.UniqueRef) {
	qs, ks := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		qs[i], ks[i] = r.Queue, r.Key
	}
	b.Queue(s.q(`INSERT INTO {s}.sequences AS s (queue, key) SELECT * FROM unnest($1::text[], $2::text[])
ON CONFLICT (queue, key) DO UPDATE SET next_no = s.next_no
RETURNING s.queue, s.key, coalesce(s.head, ''), s.next_no`), qs, ks).Query(func(rows pgx.Rows) error {
		p.seqs = map[norn.UniqueRef]*seqState{}
		var r norn.UniqueRef
		var st seqState
		_, err := pgx.ForEachRow(rows, []any{&r.Queue, &r.Key, &st.head, &st.next}, func() error {
			c := st
			p.seqs[r] = &c
			return nil
		})
		return err
	})
}

// joinSequence places nt, decided to start in in, in its sequence: the
// head when it has none, else a blocked member. It returns nt's number.
func (p *submitPlan) joinSequence(nt *norn.NewTask, in *norn.Initial) int64 {
	st := p.seqs[norn.UniqueRef{Queue: nt.Queue, Key: nt.SequenceKey}]
	no := st.next
	st.next++
	if st.head == "" {
		st.head = nt.ID
	} else {
		in.Status = norn.StatusBlocked
	}
	return no
}

// saveSequences writes the heads and next numbers a submit decided.
func (s *Store) saveSequences(ctx context.Context, q querier, p *submitPlan) error {
	var qs, ks, heads []string
	var next []int64
	for r, st := range p.seqs {
		qs, ks, heads, next = append(qs, r.Queue), append(ks, r.Key), append(heads, st.head), append(next, st.next)
	}
	_, err := q.Exec(ctx, s.q(`UPDATE {s}.sequences s SET head = nullif(x.head, ''), next_no = x.next
FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) x(queue, key, head, next)
WHERE s.queue = x.queue AND s.key = x.key`), qs, ks, heads, next)
	return err
}

// seqInfoSQL reads sequences' states ({where}: which).
const seqInfoSQL = `SELECT s.key, s.head, t.status, s.halted,
	(SELECT count(*) FROM {s}.tasks w WHERE w.queue = s.queue AND w.sequence_key = s.key AND w.ist = 'blocked'
		AND w.id IS DISTINCT FROM s.head)
FROM {s}.sequences s LEFT JOIN {s}.tasks t ON t.id = s.head WHERE `

// Sequence reads a sequence's state; see norn.Sequencer.
func (s *Store) Sequence(ctx context.Context, queue, key string) (norn.SequenceInfo, error) {
	if err := norn.ValidateQueue("queue", queue); err != nil {
		return norn.SequenceInfo{}, err
	}
	if err := norn.ValidateSequenceKey("key", key); err != nil {
		return norn.SequenceInfo{}, err
	}
	got, err := s.readSequences(ctx, queue, `s.queue = $1 AND s.key = $2`, queue, key)
	if err != nil || len(got) == 0 {
		return norn.SequenceInfo{Queue: queue, Key: key}, err
	}
	return got[0], nil
}

// Sequences lists a queue's sequences with a head; see norn.Sequencer.
func (s *Store) Sequences(ctx context.Context, queue string, q norn.SequenceQuery) ([]norn.SequenceInfo, error) {
	if err := norn.ValidateQueue("queue", queue); err != nil {
		return nil, err
	}
	if err := q.Validate(); err != nil {
		return nil, err
	}
	return s.readSequences(ctx, queue, `s.queue = $1 AND s.head IS NOT NULL AND (s.halted OR NOT $2) AND s.key > $3
ORDER BY s.key LIMIT $4`, queue, q.Halted, q.After, q.Limit)
}

func (s *Store) readSequences(ctx context.Context, queue, where string, args ...any) ([]norn.SequenceInfo, error) {
	var out []norn.SequenceInfo
	err := s.withConn(ctx, func(conn *pgx.Conn) error {
		out = out[:0]
		rows, err := conn.Query(ctx, s.q(seqInfoSQL+where), args...)
		if err != nil {
			return err
		}
		info := norn.SequenceInfo{Queue: queue}
		var head, status *string
		_, err = pgx.ForEachRow(rows, []any{&info.Key, &head, &status, &info.Halted, &info.Waiting}, func() error {
			i := info
			if head != nil {
				i.Head = *head
			}
			if status != nil {
				i.HeadStatus = norn.Status(*status)
			}
			out = append(out, i)
			return nil
		})
		return err
	})
	if out == nil {
		out = []norn.SequenceInfo{}
	}
	return out, mapErr(err)
}

// checkSequenceRetry locks t's sequence and refuses to bring t back
// beside its live head (norn.CheckSequenceRetry). q is the retry's
// transaction.
func (s *Store) checkSequenceRetry(ctx context.Context, q querier, t *norn.Task) error {
	if t.SequenceKey == "" {
		return nil
	}
	var info norn.SequenceInfo
	var head *string
	err := q.QueryRow(ctx, s.q(`SELECT head FROM {s}.sequences WHERE queue = $1 AND key = $2 FOR UPDATE`),
		t.Queue, t.SequenceKey).Scan(&head)
	if err != nil && err != pgx.ErrNoRows {
		return err
	}
	if head != nil {
		info.Head = *head
	}
	return norn.CheckSequenceRetry(t, info)
}
