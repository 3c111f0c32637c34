// Package storecopy moves a store's contents into another (norn copy):
// queue and key settings, every task as it is stored (status, lease,
// history, errors, result, log, version), and schedules; then it checks
// that both hold the same. The source is read through norn.Store; the
// destination writes tasks as they are through norn.TaskImporter. Memory
// stays constant: tasks go by batches in id order.
package storecopy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nornq/norn"
)

// Destination is a store that takes tasks as they are.
type Destination interface {
	norn.Store
	norn.TaskImporter
}

// Options tune Copy.
type Options struct {
	// Batch is how many tasks go in one import. Default 500.
	Batch int
	// Resume continues an interrupted copy into the same destination:
	// tasks already there with the same version are skipped. Without it
	// (or IntoNonEmpty) a destination holding any task is refused.
	Resume bool
	// IntoNonEmpty adds the source's tasks to a destination that holds
	// others (an id stored on both sides with different versions is still
	// a conflict).
	IntoNonEmpty bool
	// Progress, when set, is called after each batch with the tasks read
	// so far and the source's total.
	Progress func(done, total int64)
}

// Report says what a copy did.
type Report struct {
	Tasks     int64         `json:"tasks"`
	Imported  int64         `json:"imported"`
	Queues    int           `json:"queues"`
	Schedules int           `json:"schedules"`
	Batches   int           `json:"batches"`
	Took      time.Duration `json:"took"`
	Check     Check         `json:"check"`
}

// Copy moves src's contents into dst and checks the result; see the
// package comment. Neither store may be written by anyone else meanwhile.
func Copy(ctx context.Context, src norn.Store, dst Destination, o Options) (Report, error) {
	start := time.Now()
	if o.Batch <= 0 {
		o.Batch = 500
	}
	var rep Report
	total, err := countAll(ctx, src)
	if err != nil {
		return rep, fmt.Errorf("counting the source's tasks: %w", err)
	}
	if !o.Resume && !o.IntoNonEmpty {
		if n, err := countAll(ctx, dst); err != nil {
			return rep, fmt.Errorf("counting the destination's tasks: %w", err)
		} else if n > 0 {
			return rep, norn.Invalid("to", "the destination holds %d tasks already: give --resume to continue an interrupted copy into it, or --into-non-empty to add to what it holds", n)
		}
	}
	if rep.Queues, err = copyQueues(ctx, src, dst); err != nil {
		return rep, fmt.Errorf("copying queue settings: %w", err)
	}
	if rep.Tasks, rep.Imported, err = copyTasks(ctx, src, dst, o, total); err != nil {
		return rep, err
	}
	if rep.Batches, err = copyBatches(ctx, src, dst); err != nil {
		return rep, fmt.Errorf("copying batches: %w", err)
	}
	if err := dst.FinishImport(ctx); err != nil {
		return rep, fmt.Errorf("settling dependencies: %w", err)
	}
	if rep.Schedules, err = copySchedules(ctx, src, dst); err != nil {
		return rep, fmt.Errorf("copying schedules: %w", err)
	}
	if rep.Check, err = Verify(ctx, src, dst); err != nil {
		return rep, fmt.Errorf("checking the copy: %w", err)
	}
	rep.Took = time.Since(start)
	return rep, nil
}

// countAll counts every task of s (by the grouped count, which takes no
// filter).
func countAll(ctx context.Context, s norn.Store) (int64, error) {
	gs, err := s.CountGrouped(ctx, norn.Filter{})
	var n int64
	for _, g := range gs {
		n += g.Count
	}
	return n, err
}

// copyQueues gives dst every queue of src with its settings: defaults,
// flow limits, rate limit and each key's own settings.
func copyQueues(ctx context.Context, src, dst norn.Store) (int, error) {
	qs, err := src.Queues(ctx)
	if err != nil {
		return 0, err
	}
	for _, q := range qs {
		full, err := src.Queue(ctx, q.Name) // Keys are read only for a queue alone
		if err != nil {
			return 0, err
		}
		if _, err := dst.UpdateQueue(ctx, q.Name, queueUpdate(full)); err != nil {
			return 0, fmt.Errorf("queue %q: %w", q.Name, err)
		}
	}
	return len(qs), nil
}

// queueUpdate is the update that gives a queue q's settings.
func queueUpdate(q norn.QueueInfo) norn.QueueUpdate {
	d := q.Defaults
	retry := norn.RetryPolicy{}
	if d.Retry != nil {
		retry = *d.Retry
	}
	u := norn.QueueUpdate{Paused: &q.Paused, Timeout: &d.Timeout, MaxAttempts: &d.MaxAttempts, Retention: &d.Retention,
		MaxRuntime: &d.MaxRuntime, ExpireIn: &d.ExpireIn, MaxRunning: &q.MaxRunning, KeyLimit: &q.KeyLimit, FairBy: &q.FairBy,
		RateLimit: &q.RateLimit, KeyRateLimit: &q.KeyRateLimit, SequenceOnFailure: &d.SequenceOnFailure}
	if d.Retry != nil {
		// A queue without a policy follows the default; a zero one never
		// retries: only the latter is set.
		u.Retry = &retry
	}
	for _, k := range q.Keys {
		if k.KeySettings == (norn.KeySettings{}) {
			continue // listed for its running tasks only
		}
		if u.Keys == nil {
			u.Keys = map[string]*norn.KeySettings{}
		}
		ks := k.KeySettings
		u.Keys[k.Key] = &ks
	}
	return u
}

// copyTasks streams src's tasks in id order into dst by batches.
func copyTasks(ctx context.Context, src norn.Store, dst norn.TaskImporter, o Options, total int64) (read, imported int64, err error) {
	it, err := src.Stream(ctx, norn.Query{})
	if err != nil {
		return 0, 0, fmt.Errorf("reading the source: %w", err)
	}
	defer it.Close()
	batch := make([]norn.TaskRecord, 0, o.Batch)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		n, err := dst.ImportTasks(ctx, batch)
		if err != nil {
			return fmt.Errorf("importing the tasks from %q on: %w", batch[0].Task.ID, err)
		}
		imported += int64(n)
		read += int64(len(batch))
		batch = batch[:0]
		if o.Progress != nil {
			o.Progress(read, total)
		}
		return nil
	}
	for it.Next() {
		t := it.Item().Clone()
		log, err := src.ReadLog(ctx, t.ID, 0, 0)
		if err != nil {
			return read, imported, fmt.Errorf("reading the log of %q: %w", t.ID, err)
		}
		batch = append(batch, norn.TaskRecord{Task: t, Log: log})
		if len(batch) == o.Batch {
			if err := flush(); err != nil {
				return read, imported, err
			}
		}
	}
	if err := it.Err(); err != nil {
		return read, imported, fmt.Errorf("reading the source: %w", err)
	}
	return read, imported, flush()
}

// copyBatches puts src's batches into dst as they are, a page at a time.
func copyBatches(ctx context.Context, src norn.Store, dst Destination) (int, error) {
	n, after := 0, ""
	for {
		bs, err := src.ListBatches(ctx, norn.BatchQuery{After: after, Limit: norn.MaxListLimit})
		if err != nil || len(bs) == 0 {
			return n, err
		}
		if _, err := dst.ImportBatches(ctx, bs); err != nil {
			return n, err
		}
		n += len(bs)
		after = bs[len(bs)-1].ID
	}
}

// copySchedules puts src's schedules into dst when both keep schedules.
func copySchedules(ctx context.Context, src, dst norn.Store) (int, error) {
	from, ok1 := src.(norn.ScheduleAPI)
	to, ok2 := dst.(norn.ScheduleAPI)
	if !ok1 || !ok2 {
		return 0, nil
	}
	scs, err := from.ListSchedules(ctx)
	if err != nil {
		return 0, err
	}
	for _, sc := range scs {
		if _, err := to.PutSchedule(ctx, *sc); err != nil {
			return 0, fmt.Errorf("schedule %q: %w", sc.Name, err)
		}
	}
	return len(scs), nil
}

// Check compares two stores: their task counts by queue and status and a
// checksum over every task in id order.
type Check struct {
	Same bool `json:"same"`
	// Counts are the source's counts by queue and status.
	Counts []norn.GroupCount `json:"counts"`
	// Checksum is the source's (SHA-256, hex).
	Checksum string `json:"checksum"`
	// Differences names what differs (empty when Same).
	Differences []string `json:"differences,omitempty"`
}

// Verify compares src and dst; see Check.
func Verify(ctx context.Context, src, dst norn.Store) (Check, error) {
	var c Check
	sc, err := src.CountGrouped(ctx, norn.Filter{})
	if err != nil {
		return c, err
	}
	dc, err := dst.CountGrouped(ctx, norn.Filter{})
	if err != nil {
		return c, err
	}
	c.Counts = sortCounts(sc)
	if !slices.Equal(c.Counts, sortCounts(dc)) {
		c.Differences = append(c.Differences, fmt.Sprintf("counts by queue and status differ: source %v, destination %v", c.Counts, sortCounts(dc)))
	}
	s, firstS, err := checksum(ctx, src)
	if err != nil {
		return c, err
	}
	d, firstD, err := checksum(ctx, dst)
	if err != nil {
		return c, err
	}
	c.Checksum = s
	if s != d {
		c.Differences = append(c.Differences, fmt.Sprintf("task checksums differ (source %s, destination %s)%s", s[:12], d[:12], firstDiff(firstS, firstD)))
	}
	c.Same = len(c.Differences) == 0
	return c, nil
}

func sortCounts(gs []norn.GroupCount) []norn.GroupCount {
	out := slices.Clone(gs)
	slices.SortFunc(out, func(a, b norn.GroupCount) int {
		if a.Queue != b.Queue {
			if a.Queue < b.Queue {
				return -1
			}
			return 1
		}
		if a.Status < b.Status {
			return -1
		} else if a.Status > b.Status {
			return 1
		}
		return 0
	})
	return out
}

// checksum hashes every task of s in id order (canonical form, see
// canonical) and returns the per-task digests' first few for a diff.
func checksum(ctx context.Context, s norn.Store) (string, []string, error) {
	it, err := s.Stream(ctx, norn.Query{})
	if err != nil {
		return "", nil, err
	}
	defer it.Close()
	h := sha256.New()
	var firsts []string
	for it.Next() {
		b := canonical(it.Item())
		h.Write(b)
		h.Write([]byte{'\n'})
		if len(firsts) < 1<<16 {
			sum := sha256.Sum256(b)
			firsts = append(firsts, it.Item().ID+" "+hex.EncodeToString(sum[:8]))
		}
	}
	if err := it.Err(); err != nil {
		return "", nil, err
	}
	return hex.EncodeToString(h.Sum(nil)), firsts, nil
}

// firstDiff names the first task whose digest differs, among the first
// 65,536 of each side.
func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("; first differing task: %s", a[i][:len(a[i])-17])
		}
	}
	return ""
}

// canonical is t's JSON with every time at microsecond precision (what
// PostgreSQL keeps): a copy from the embedded store keeps everything else.
func canonical(t *norn.Task) []byte {
	c := t.Clone()
	for _, p := range []*time.Time{&c.Created, &c.Updated, &c.RunAt, &c.Deadline, &c.Started, &c.ExpiresAt} {
		*p = micro(*p)
	}
	for i := range c.History {
		c.History[i].Time = micro(c.History[i].Time)
	}
	for i := range c.Signals {
		c.Signals[i].Time = micro(c.Signals[i].Time)
	}
	if c.SignalWait != nil {
		c.SignalWait.Until = micro(c.SignalWait.Until)
	}
	if c.Labels != nil {
		c.Labels = maps.Clone(c.Labels)
	}
	b, _ := json.Marshal(c)
	return b
}

func micro(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Microsecond)
}
