package embedded

import (
	"slices"

	"github.com/nornq/norn"
)

// The unique-key index. Submits look keys up and insert under s.mu, so the
// check and the insert are one atomic step for every concurrent submitter.
// A task enters the index when it is inserted (or loaded at open) and
// leaves it when deleted; whether it still holds its key (not terminal, or
// ended recently enough) is read from its state at each lookup, so no
// transition needs to maintain the index.

// addUnique records that t holds key.
func (s *Store) addUnique(t *task, key string) {
	ref := norn.UniqueRef{Queue: t.q.name, Key: key}
	s.unique[ref] = append(s.unique[ref], t)
	s.uniqueOf[t] = key
}

// dropUnique removes t from the index (a no-op for tasks without a key).
func (s *Store) dropUnique(t *task) {
	key, ok := s.uniqueOf[t]
	if !ok {
		return
	}
	delete(s.uniqueOf, t)
	ref := norn.UniqueRef{Queue: t.q.name, Key: key}
	l := slices.DeleteFunc(s.unique[ref], func(o *task) bool { return o == t })
	if len(l) == 0 {
		delete(s.unique, ref)
	} else {
		s.unique[ref] = l
	}
}

// uniqueHolders returns the tasks holding ref as norn sees them.
func (s *Store) uniqueHolders(ref norn.UniqueRef) []norn.UniqueHolder {
	l := s.unique[ref]
	if len(l) == 0 {
		return nil
	}
	out := make([]norn.UniqueHolder, len(l))
	for i, t := range l {
		out[i] = norn.UniqueHolder{ID: t.id, Status: statusOf(t.st.status), Ended: fromNanos(t.st.endedAt)}
	}
	return out
}
