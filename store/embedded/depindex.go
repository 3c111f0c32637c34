package embedded

import (
	"slices"

	"github.com/nornq/norn"
)

// The depends_on index: for every id some task lists among its
// dependencies, the tasks that list it, whatever their status and whether
// or not the dependency still exists. It answers the depends_on filter
// without reading every task from disk (the PostgreSQL store uses a GIN
// index for the same). s.dependents is a different thing: the blocked
// tasks still waiting for a dependency, emptied as they are released.
//
// Both maps only hold tasks that have dependencies; the task struct does
// not grow (a million tasks in memory make every byte count).

// indexDeps records that t depends on deps. Callers hold s.mu.
func (s *Store) indexDeps(t *task, deps []string) {
	if len(deps) == 0 {
		return
	}
	deps = slices.Clone(deps)
	slices.Sort(deps)
	deps = slices.Compact(deps)
	s.depsOf[t] = deps
	for _, d := range deps {
		s.byDep[d] = append(s.byDep[d], t)
	}
}

// unindexDeps forgets t's dependencies and returns them (nil when it had
// none). Callers hold s.mu. Removing t from a dependency's list is linear
// in that list: fan-in is what a user builds, not what a store grows.
func (s *Store) unindexDeps(t *task) []string {
	deps, ok := s.depsOf[t]
	if !ok {
		return nil
	}
	delete(s.depsOf, t)
	for _, d := range deps {
		l := s.byDep[d]
		if i := slices.Index(l, t); i >= 0 {
			l[i] = l[len(l)-1]
			l[len(l)-1] = nil
			l = l[:len(l)-1]
		}
		if len(l) == 0 {
			delete(s.byDep, d)
		} else {
			s.byDep[d] = l
		}
	}
	return deps
}

// eachMem calls fn for every task whose in-memory fields match f (labels
// are not checked: they live on disk), through the batch's members when f
// names a batch, or the depends_on index when it names a dependency.
// Callers hold s.mu.
func (s *Store) eachMem(f *norn.Filter, fn func(*task)) {
	if f.Batch != "" {
		for t := range s.members[f.Batch] {
			if matchMem(f, t) && (f.DependsOn == "" || slices.Contains(s.depsOf[t], f.DependsOn)) {
				fn(t)
			}
		}
		return
	}
	if f.DependsOn != "" {
		for _, t := range s.byDep[f.DependsOn] {
			if matchMem(f, t) {
				fn(t)
			}
		}
		return
	}
	for t := range s.tasks.all() {
		if matchMem(f, t) {
			fn(t)
		}
	}
}

// indexedIDs returns, sorted, the ids of the tasks listing f.DependsOn
// whose in-memory fields match f.
func (s *Store) indexedIDs(f *norn.Filter) []string {
	s.mu.Lock()
	ids := make([]string, 0, len(s.byDep[f.DependsOn]))
	s.eachMem(f, func(t *task) { ids = append(ids, t.id) })
	s.mu.Unlock()
	slices.Sort(ids)
	return ids
}
