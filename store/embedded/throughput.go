package embedded

import (
	"context"
	"encoding/binary"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/nornq/norn"
)

// Throughput history (norn.ThroughputStore): one key per queue, step and
// time — 'h', the queue name, 0, the step (1 for a minute, 2 for an hour),
// the Unix second big-endian — so a queue's minutes read in time order,
// then its hours. The value is the
// three counts as uvarints.

const pfxThroughput = 'h'

const (
	stepMinute = 1
	stepHour   = 2
)

func throughputKey(queue string, step byte, at time.Time) []byte {
	k := make([]byte, 0, len(queue)+12)
	k = append(k, pfxThroughput)
	k = append(k, queue...)
	k = append(k, 0, step)
	return binary.BigEndian.AppendUint64(k, uint64(at.Unix()))
}

// parseThroughputKey splits a key; ok is false for a key of another shape.
func parseThroughputKey(k []byte) (queue string, step byte, at time.Time, ok bool) {
	if len(k) < 11 || k[0] != pfxThroughput || k[len(k)-10] != 0 {
		return "", 0, time.Time{}, false
	}
	queue = string(k[1 : len(k)-10])
	step = k[len(k)-9]
	at = time.Unix(int64(binary.BigEndian.Uint64(k[len(k)-8:])), 0).UTC()
	return queue, step, at, step == stepMinute || step == stepHour
}

func encodeCounts(r norn.ThroughputRecord) []byte {
	b := binary.AppendUvarint(nil, uint64(r.Submitted))
	b = binary.AppendUvarint(b, uint64(r.Completed))
	return binary.AppendUvarint(b, uint64(r.Failed))
}

func decodeCounts(v []byte, r *norn.ThroughputRecord) error {
	var n [3]uint64
	for i := range n {
		x, w := binary.Uvarint(v)
		if w <= 0 {
			return errCorrupt
		}
		n[i], v = x, v[w:]
	}
	r.Submitted, r.Completed, r.Failed = int64(n[0]), int64(n[1]), int64(n[2])
	return nil
}

// SaveThroughput stores minutes, keeping the larger of each count.
func (s *Store) SaveThroughput(ctx context.Context, recs []norn.ThroughputRecord) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	if err := norn.ValidateThroughput(recs); err != nil {
		return err
	}
	// Merged first: a batch cannot read its own writes.
	merged := map[string]norn.ThroughputRecord{}
	for _, r := range recs {
		k := string(throughputKey(r.Queue, stepMinute, r.At))
		m := merged[k]
		m.Max(r)
		merged[k] = m
	}
	return s.run(func(tx *txn) error {
		tx.grows = true
		for k, r := range merged {
			var cur norn.ThroughputRecord
			if v, closer, err := s.db.Get([]byte(k)); err == nil {
				err = decodeCounts(v, &cur)
				closer.Close()
				if err != nil {
					return err
				}
			} else if err != pebble.ErrNotFound {
				return err
			}
			r.Max(cur)
			if err := tx.b.Set([]byte(k), encodeCounts(r), nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// LoadThroughput returns the stored steps of queues in [since, until).
func (s *Store) LoadThroughput(ctx context.Context, queues []string, since, until time.Time) ([]norn.ThroughputRecord, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	var ranges [][2][]byte
	if queues == nil {
		ranges = append(ranges, [2][]byte{{pfxThroughput}, {pfxThroughput + 1}})
	} else {
		qs := slices.Clone(queues)
		slices.Sort(qs)
		for _, q := range slices.Compact(qs) {
			lo := append(append([]byte{pfxThroughput}, q...), 0)
			ranges = append(ranges, [2][]byte{lo, append(slices.Clone(lo[:len(lo)-1]), 1)})
		}
	}
	var out []norn.ThroughputRecord
	for _, r := range ranges {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: r[0], UpperBound: r[1]})
		if err != nil {
			return nil, err
		}
		for it.First(); it.Valid(); it.Next() {
			q, step, at, ok := parseThroughputKey(it.Key())
			if !ok || at.Before(since) || !at.Before(until) {
				continue
			}
			rec := norn.ThroughputRecord{Queue: q, Step: time.Minute, At: at}
			if step == stepHour {
				rec.Step = time.Hour
			}
			if err := decodeCounts(it.Value(), &rec); err != nil {
				it.Close()
				return nil, err
			}
			out = append(out, rec)
		}
		if err := it.Close(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CompactThroughput sums old minutes into hours and drops old hours, in
// one write under the store's lock (so once, whoever calls it).
func (s *Store) CompactThroughput(ctx context.Context, minuteBefore, hourBefore time.Time) error {
	if err := s.enter(); err != nil {
		return err
	}
	defer s.exit()
	return s.run(func(tx *txn) error {
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{pfxThroughput}, UpperBound: []byte{pfxThroughput + 1}})
		if err != nil {
			return err
		}
		// A queue's minute keys sort before its hour keys, so the minutes
		// of an hour are summed before its stored counts are read.
		hours := map[string]norn.ThroughputRecord{}
		touched := map[string]bool{}
		for it.First(); it.Valid(); it.Next() {
			q, step, at, ok := parseThroughputKey(it.Key())
			switch {
			case !ok:
				continue
			case step == stepHour && at.Before(hourBefore):
				err = tx.b.Delete(it.Key(), nil)
			case step == stepHour && touched[string(it.Key())]:
				var h norn.ThroughputRecord
				if err = decodeCounts(it.Value(), &h); err == nil {
					h.Add(hours[string(it.Key())])
					hours[string(it.Key())] = h
				}
			case step == stepMinute && at.Before(minuteBefore):
				hk := string(throughputKey(q, stepHour, at.Truncate(time.Hour)))
				var m norn.ThroughputRecord
				if err = decodeCounts(it.Value(), &m); err == nil {
					h := hours[hk]
					h.Add(m)
					hours[hk], touched[hk] = h, true
					err = tx.b.Delete(it.Key(), nil)
				}
			}
			if err != nil {
				it.Close()
				return err
			}
		}
		if err := it.Close(); err != nil {
			return err
		}
		for k := range touched {
			_, _, at, _ := parseThroughputKey([]byte(k))
			if h := hours[k]; !at.Before(hourBefore) && !h.Zero() {
				if err := tx.b.Set([]byte(k), encodeCounts(h), nil); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

var _ norn.ThroughputStore = (*Store)(nil)
