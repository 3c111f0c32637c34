package storetest

import (
	"testing"

	"github.com/nornq/norn"
)

// exerciseDependsOnFilter checks the depends_on filter: the tasks that list
// an id among their dependencies, whatever their status, including after the
// dependency settled (the dashboard's task page asks it of finished tasks).
func exerciseDependsOnFilter(t *testing.T, setup setupFunc) {
	t.Run("DependsOnFilter", func(t *testing.T) {
		t.Parallel()
		_, b := setup(t)
		b.submit(norn.NewTask{ID: "a", Queue: "q"},
			norn.NewTask{ID: "other", Queue: "q"},
			norn.NewTask{ID: "b", Queue: "q", DependsOn: []string{"a"}},
			norn.NewTask{ID: "c", Queue: "q2", DependsOn: []string{"other", "a"}, Labels: map[string]string{"k": "v"}},
			norn.NewTask{ID: "d", Queue: "q", DependsOn: []string{"b"}},
			norn.NewTask{ID: "e", Queue: "q", DependsOn: []string{"other"}})

		t.Run("BlockedDependents", func(t *testing.T) {
			b.with(t).checkFilter("depends_on a", norn.Filter{DependsOn: "a"}, []string{"b", "c"})
		})
		t.Run("NoDependents", func(t *testing.T) {
			b.with(t).checkFilter("depends_on e", norn.Filter{DependsOn: "e"}, nil)
		})
		t.Run("UnknownID", func(t *testing.T) {
			b.with(t).checkFilter("depends_on zz", norn.Filter{DependsOn: "zz"}, nil)
		})
		t.Run("WithOtherFields", func(t *testing.T) {
			b.with(t).checkFilter("depends_on a, queue q2", norn.Filter{DependsOn: "a", Queues: []string{"q2"}}, []string{"c"})
			b.with(t).checkFilter("depends_on a, label", norn.Filter{DependsOn: "a", Labels: map[string]string{"k": "v"}}, []string{"c"})
			b.with(t).checkFilter("depends_on a, blocked", norn.Filter{DependsOn: "a", Statuses: []norn.Status{norn.StatusBlocked}}, []string{"b", "c"})
		})
		t.Run("AfterTheDependencySettled", func(t *testing.T) {
			b := b.with(t)
			b.complete(b.claimID("w", "a", "q"), "")
			b.sweep()
			b.status("b", norn.StatusReady)
			b.checkFilter("depends_on a", norn.Filter{DependsOn: "a"}, []string{"b", "c"})
			b.checkFilter("depends_on a, ready", norn.Filter{DependsOn: "a", Statuses: []norn.Status{norn.StatusReady}}, []string{"b"})
		})
		t.Run("InvalidID", func(t *testing.T) {
			_, err := b.s.Count(b.ctx, norn.Filter{DependsOn: "bad id\n"})
			wantField(t, "Count with an invalid depends_on", err, norn.ErrInvalidArgument, "depends_on")
		})
	})
}
