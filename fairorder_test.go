package norn

import "testing"

func TestFairFirst(t *testing.T) {
	for _, c := range []struct {
		name                   string
		aPrio, aVT, bPrio, bVT int64
		want                   int
	}{
		{"higher priority first, whatever the virtual time", 5, 900, 1, 0, -1},
		{"lower priority second", 1, 0, 5, 900, 1},
		{"same priority: less virtual time first", 3, 10, 3, 20, -1},
		{"same priority: more virtual time second", 3, 20, 3, 10, 1},
		{"a tie leaves it to claim order", 3, 10, 3, 10, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := FairFirst(c.aPrio, c.aVT, c.bPrio, c.bVT); got != c.want {
				t.Fatalf("FairFirst = %d, want %d", got, c.want)
			}
		})
	}
}
