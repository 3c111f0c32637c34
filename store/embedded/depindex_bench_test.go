package embedded

import (
	"fmt"
	"testing"

	"github.com/nornq/norn"
)

// BenchmarkDependsOnFilter: listing and counting the 10 dependents of one
// task among n tasks (the dashboard's task page asks this of every task
// it shows). Figures: docs/benchmarks.md.
func BenchmarkDependsOnFilter(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		s := benchStore(b, Opportunistic)
		fill(b, s, "q", n)
		if _, err := s.Submit(bg, norn.NewTask{ID: "parent", Queue: "p"}); err != nil {
			b.Fatal(err)
		}
		for i := range 10 {
			if _, err := s.Submit(bg, norn.NewTask{ID: fmt.Sprintf("child-%d", i), Queue: "p", DependsOn: []string{"parent"}}); err != nil {
				b.Fatal(err)
			}
		}
		f := norn.Filter{DependsOn: "parent"}
		b.Run(fmt.Sprintf("List/tasks=%d", n), func(b *testing.B) {
			for b.Loop() {
				p, err := s.List(bg, norn.Query{Filter: f, Summary: true})
				if err != nil || len(p.Tasks) != 10 {
					b.Fatalf("%d tasks, %v", len(p.Tasks), err)
				}
			}
		})
		b.Run(fmt.Sprintf("Count/tasks=%d", n), func(b *testing.B) {
			for b.Loop() {
				if c, err := s.Count(bg, f); err != nil || c != 10 {
					b.Fatalf("%d, %v", c, err)
				}
			}
		})
	}
}
