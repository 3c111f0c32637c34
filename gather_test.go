package norn

import (
	"testing"
	"time"
)

func TestGathered(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		min    int
		linger time.Duration
		ready  int
		oldest time.Time
		now    time.Time
		take   bool
		retry  time.Time
	}{
		{"no min takes at once", 0, 0, 1, t0, t0, true, time.Time{}},
		{"min 1 is no batch", 1, 0, 1, t0, t0, true, time.Time{}},
		{"enough ready", 5, time.Second, 5, t0, t0, true, time.Time{}},
		{"too few, no linger: wait for more", 5, 0, 4, t0, t0.Add(time.Hour), false, time.Time{}},
		{"too few, lingering", 5, 2 * time.Second, 3, t0, t0.Add(time.Second), false, t0.Add(2 * time.Second)},
		{"too few, linger over", 5, 2 * time.Second, 3, t0, t0.Add(2 * time.Second), true, time.Time{}},
		{"none ready", 5, 2 * time.Second, 0, time.Time{}, t0, false, time.Time{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ClaimRequest{Min: c.min, Linger: Duration(c.linger)}
			take, retry := r.Gathered(c.ready, c.oldest, c.now)
			if take != c.take || !retry.Equal(c.retry) {
				t.Fatalf("Gathered = %v, %v; want %v, %v", take, retry, c.take, c.retry)
			}
		})
	}
}
