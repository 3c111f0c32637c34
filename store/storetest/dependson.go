package storetest

import (
	"fmt"
	"testing"

	"github.com/nornq/norn"
)

// exerciseDependsOnFilter checks the depends_on filter: the tasks that list
// an id among their dependencies, whatever their status, including after the
// dependency settled (the dashboard's task page asks it of finished tasks).
func exerciseDependsOnFilter(t *testing.T, setup setupFunc) {
	t.Run("DependsOnFilter", func(t *testing.T) {
		t.Parallel()
		t.Run("PagesInEveryOrder", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.submit(norn.NewTask{ID: "p", Queue: "q"}, norn.NewTask{ID: "x", Queue: "q"})
			var kids []norn.NewTask
			for i := range 12 {
				kids = append(kids, norn.NewTask{ID: fmt.Sprintf("k%02d", i), Queue: "q", Priority: uint32(i % 3), DependsOn: []string{"p"}})
			}
			kids = append(kids, norn.NewTask{ID: "k-other", Queue: "q", DependsOn: []string{"x"}})
			b.submit(kids...)
			for _, order := range []norn.Order{norn.OrderID, norn.OrderNewest, norn.OrderPriority} {
				got := b.listAll(norn.Query{Filter: norn.Filter{DependsOn: "p"}, Order: order, Limit: 5})
				if len(got) != 12 {
					t.Fatalf("order %q: %d tasks, want 12", order, len(got))
				}
				for i := 1; i < len(got); i++ {
					a, c := got[i-1], got[i]
					var ok bool
					switch order {
					case norn.OrderNewest:
						ok = a.ID > c.ID
					case norn.OrderPriority:
						ok = a.Priority > c.Priority || a.Priority == c.Priority && a.ID < c.ID
					default:
						ok = a.ID < c.ID
					}
					if !ok {
						t.Fatalf("order %q: %s before %s", order, a.ID, c.ID)
					}
				}
			}
		})
		t.Run("DeletedDependentIsGone", func(t *testing.T) {
			t.Parallel()
			_, b := setup(t)
			b.submit(norn.NewTask{ID: "p", Queue: "q"},
				norn.NewTask{ID: "k1", Queue: "q", DependsOn: []string{"p"}},
				norn.NewTask{ID: "k2", Queue: "q", DependsOn: []string{"p", "p2"}},
				norn.NewTask{ID: "p2", Queue: "q"})
			b.delete("k1")
			b.checkFilter("depends_on p after a delete", norn.Filter{DependsOn: "p"}, []string{"k2"})
			// A dependency deleted keeps its dependents findable by its id.
			b.delete("p")
			b.checkFilter("depends_on a deleted p", norn.Filter{DependsOn: "p"}, []string{"k2"})
			b.checkFilter("depends_on p2", norn.Filter{DependsOn: "p2"}, []string{"k2"})
		})
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
