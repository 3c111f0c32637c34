package storetest

import (
	"testing"

	"github.com/nornq/norn"
)

func exerciseReadLog(t *testing.T, setup setupFunc) {
	t.Run("ReadLog", func(t *testing.T) {
		t.Parallel()

		t.Run("OfATaskThatNeverRanIsEmpty", func(t *testing.T) {
			t.Parallel()
			s, b := setup(t)
			tk := b.submitOne(norn.NewTask{Queue: "q"})
			entries, err := s.ReadLog(b.ctx, tk.ID, 0, 0)
			b.must(err, "ReadLog(%q) of a task that never ran", tk.ID)
			if len(entries) != 0 {
				t.Fatalf("ReadLog of a fresh task: %d entries", len(entries))
			}
		})
	})
}
