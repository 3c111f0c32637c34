package norn

import "time"

// Unique keys: the decisions every store makes the same way. A store only
// finds the stored tasks holding a key (atomically with the insert that
// follows) and persists; whether a submission is a duplicate, and of which
// task, is decided here.
//
// The rules, in order:
//   - an id that exists already decides first (a duplicate of that task in
//     the same queue, a conflict in another), whatever the unique key;
//   - a task of the same queue holding the key and not terminal makes the
//     submission a duplicate of it;
//   - with UniqueFor, so does one that ended less than UniqueFor ago (the
//     one that ended last, when there are several);
//   - within a batch (or a transaction's submits), a task whose queue and
//     key an earlier new task of the batch has is a duplicate of that task.
//
// Keys are per queue, so a duplicate is always a task of the queue the
// caller submitted to: a caller allowed to submit there learns nothing
// about other queues, and a key used in two queues makes two tasks.

// ValidateUniqueKey checks a unique key: 1..256 bytes of valid UTF-8
// without control characters (keys appear in URLs, logs and the dashboard).
func ValidateUniqueKey(field, key string) error {
	return validateKey(field, key, MaxUniqueKeyLength)
}

// UniqueHolder is what a store knows of a stored task holding a unique
// key: its id, status and when it ended (zero unless terminal).
type UniqueHolder struct {
	ID     string
	Status Status
	Ended  time.Time
}

// DuplicatedBy reports whether the stored task h, holding n's queue and
// unique key, makes submitting n at now a duplicate: h is not terminal, or
// it ended less than n.UniqueFor before now.
func (n *NewTask) DuplicatedBy(h UniqueHolder, now time.Time) bool {
	if n.UniqueKey == "" {
		return false
	}
	if !h.Status.Terminal() {
		return true
	}
	return n.UniqueFor > 0 && !h.Ended.IsZero() && now.Sub(h.Ended) < n.UniqueFor.D()
}

// UniqueRef names a unique key: keys are per queue.
type UniqueRef struct{ Queue, Key string }

// PlanUnique decides which tasks of a batch are duplicates by unique key.
// ids are the batch's ids; settled[i] marks tasks already decided (id
// duplicates; nil when none is). holders returns the stored tasks holding
// a key, in any order. The result maps the index of every duplicate to the
// id of the task it duplicates: a stored task, or an earlier new task of
// the batch. It is nil when the batch has none.
func PlanUnique(tasks []NewTask, ids []string, settled []bool, now time.Time, holders func(UniqueRef) []UniqueHolder) map[int]string {
	var out map[int]string
	var first map[UniqueRef]string // keys taken by new tasks of the batch
	for i := range tasks {
		n := &tasks[i]
		if n.UniqueKey == "" || (settled != nil && settled[i]) {
			continue
		}
		ref := UniqueRef{n.Queue, n.UniqueKey}
		of, dup := first[ref]
		if !dup {
			of, dup = n.duplicateOf(holders(ref), now)
		}
		if dup {
			if out == nil {
				out = map[int]string{}
			}
			out[i] = of
			continue
		}
		if first == nil {
			first = map[UniqueRef]string{}
		}
		first[ref] = ids[i]
	}
	return out
}

// duplicateOf picks, among the holders of n's key, the task n duplicates:
// the live one, else the one that ended last within n.UniqueFor.
func (n *NewTask) duplicateOf(hs []UniqueHolder, now time.Time) (string, bool) {
	best := -1
	for i, h := range hs {
		if !n.DuplicatedBy(h, now) {
			continue
		}
		if !h.Status.Terminal() {
			return h.ID, true
		}
		if best < 0 || h.Ended.After(hs[best].Ended) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	return hs[best].ID, true
}
