package embedded

import "iter"

// taskIndex finds the in-memory tasks by id.
//
// A map[string]*task holds two pointers per task (the key's bytes and the
// value) in hash order, i.e. scattered over the heap: with a million tasks
// the garbage collector spent most of every cycle following them, one
// cache miss each (docs/internals/embedded-performance.md). Here the maps hold no pointers
// (the collector does not scan them): a canonical UUID id (every generated
// id) is looked up by its 128 bits, any other id by its string, and either
// gives a slot number in slots, a table of task pointers in the order the
// tasks were created, which the collector walks sequentially.
//
// claimed remembers the slots of recently claimed tasks with UUID ids, by
// the id's low bits: a completion finds its task there, in a table that
// stays in the cache, instead of in byUUID, where with a million tasks
// every lookup missed it (docs/internals/embedded-performance.md). An entry is a hint, checked
// against the slot's task: a later claim may have overwritten it, or its
// task may be gone and the slot reused; then byUUID answers.
type taskIndex struct {
	byUUID  map[[2]uint64]uint32
	byStr   map[string]uint32 // ids that are not canonical UUIDs
	slots   []*task           // nil when free
	free    []uint32          // free slots
	claimed *[claimedSize]uint32
}

// claimedSize is many times the tasks a store's claimers hold at once
// (2,000 in `norn bench work`, River's worker slots): an entry survives the
// claims made before its completion with a probability of about
// exp(-in flight/claimedSize). At 4,096 entries two in five completions of
// the bench missed and paid a lookup in byUUID; at 32,768 (128 KiB) one in
// sixteen does.
const claimedSize = 32768

func newTaskIndex() taskIndex {
	return taskIndex{byUUID: map[[2]uint64]uint32{}, byStr: map[string]uint32{}, claimed: new([claimedSize]uint32)}
}

// noteClaimed remembers t, which must be in the index, for getClaimed.
func (x *taskIndex) noteClaimed(t *task) {
	if k, isUUID := uuidKey(t.id); isUUID {
		x.claimed[k[1]%claimedSize] = t.slot
	}
}

// getClaimed is get for the task of a lease: usually one claimed a moment
// ago.
func (x *taskIndex) getClaimed(id string) *task {
	k, isUUID := uuidKey(id)
	if !isUUID {
		return x.get(id)
	}
	if i := x.claimed[k[1]%claimedSize]; int(i) < len(x.slots) {
		if t := x.slots[i]; t != nil && t.id == id {
			return t
		}
	}
	if i, ok := x.byUUID[k]; ok {
		return x.slots[i]
	}
	return nil
}

// get returns the task with this id, nil if none.
func (x *taskIndex) get(id string) *task {
	var i uint32
	var ok bool
	if k, isUUID := uuidKey(id); isUUID {
		i, ok = x.byUUID[k]
	} else {
		i, ok = x.byStr[id]
	}
	if !ok {
		return nil
	}
	return x.slots[i]
}

// put adds t, whose id must not be in the index.
func (x *taskIndex) put(t *task) {
	var i uint32
	if n := len(x.free); n > 0 {
		i = x.free[n-1]
		x.free = x.free[:n-1]
		x.slots[i] = t
	} else {
		i = uint32(len(x.slots))
		x.slots = append(x.slots, t)
	}
	t.slot = i
	if k, isUUID := uuidKey(t.id); isUUID {
		x.byUUID[k] = i
	} else {
		x.byStr[t.id] = i
	}
}

// del removes t (a no-op when t is not the indexed task of its id).
func (x *taskIndex) del(t *task) {
	var i uint32
	var ok bool
	k, isUUID := uuidKey(t.id)
	if isUUID {
		i, ok = x.byUUID[k]
	} else {
		i, ok = x.byStr[t.id]
	}
	if !ok || x.slots[i] != t {
		return
	}
	if isUUID {
		delete(x.byUUID, k)
	} else {
		delete(x.byStr, t.id)
	}
	x.slots[i] = nil
	x.free = append(x.free, i)
	if len(x.free) == len(x.slots) {
		// Empty: give the table back (a burst of tasks must not pin it).
		x.slots, x.free = nil, nil
	}
}

// len is the number of tasks.
func (x *taskIndex) len() int { return len(x.slots) - len(x.free) }

// all yields every task, in no particular order. fn may delete the task
// it is given, not others.
func (x *taskIndex) all() iter.Seq[*task] {
	return func(yield func(*task) bool) {
		for i := 0; i < len(x.slots); i++ {
			if t := x.slots[i]; t != nil && !yield(t) {
				return
			}
		}
	}
}
