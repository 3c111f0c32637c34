package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct {
		name        string
		live, floor uint64
		base, want  int
	}{
		{"small heap reaches the floor", 4 * mb, 32 * mb, 100, 700},
		{"tiny heap is capped", 1 * mb, 32 * mb, 100, maxPercent},
		{"heap at half the floor keeps GOGC", 16 * mb, 32 * mb, 100, 100},
		{"heap above the floor keeps GOGC", 1024 * mb, 32 * mb, 100, 100},
		{"heap equal to the floor keeps GOGC", 32 * mb, 32 * mb, 100, 100},
		{"a higher GOGC is never lowered", 4 * mb, 32 * mb, 800, 800},
		{"a lower GOGC is raised to the floor", 8 * mb, 32 * mb, 50, 300},
		{"nothing measured yet", 0, 32 * mb, 100, maxPercent},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Percent(c.live, c.floor, c.base); got != c.want {
				t.Errorf("Percent(%d, %d, %d) = %d, want %d", c.live, c.floor, c.base, got, c.want)
			}
		})
	}
}

func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TestStartRaisesTheGoalAfterACollection: the test binary's heap is a few
// MB, so a 1 GiB floor must raise GOGC to the cap once a collection has
// run, and stop must put GOGC's value back.
func TestStartRaisesTheGoalAfterACollection(t *testing.T) {
	base := gogc()
	stop := Start(1 << 30)
	deadline := time.Now().Add(10 * time.Second)
	for gogc() != maxPercent {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("GOGC is %d after collections, want %d", gogc(), maxPercent)
		}
		runtime.GC()
		time.Sleep(time.Millisecond) // the finalizer goroutine runs after the collection
	}
	stop()
	if got := gogc(); got != base {
		t.Fatalf("GOGC after stop = %d, want %d", got, base)
	}
	runtime.GC()
	runtime.GC()
	if got := gogc(); got != base {
		t.Fatalf("GOGC after stop and two collections = %d, want %d (a finalizer still tuning)", got, base)
	}
}

// TestStartLeavesGOGCOffAlone: with the collector off there is no goal to
// raise, and the floor must not turn it back on.
func TestStartLeavesGOGCOffAlone(t *testing.T) {
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	stop := Start(1 << 30)
	defer stop()
	runtime.GC()
	runtime.GC()
	if got := debug.SetGCPercent(-1); got != -1 {
		t.Fatalf("GOGC = %d after Start with the collector off, want -1 (off)", got)
	}
}
