package gcfloor

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn/internal/await"
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
	t.Cleanup(stop) // also when the wait fails; a second stop does nothing
	// The finalizer goroutine raises the goal after a collection.
	await.Check(t, 10*time.Second, "collections to raise GOGC", func() (string, error) {
		if got := gogc(); got != maxPercent {
			runtime.GC()
			return fmt.Sprintf("GOGC is %d, want %d", got, maxPercent), nil
		}
		return "", nil
	})
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

// TestFromEnv runs this test binary again as a child that calls FromEnv,
// collects and prints the GOGC value it ends with: the floor raises it
// unless GOGC or GOMEMLIMIT is in the environment.
func TestFromEnv(t *testing.T) {
	if os.Getenv("GCFLOOR_CHILD") == "1" {
		FromEnv()
		FromEnv() // a second call does nothing
		for i := 0; i < 50 && gogc() == 100; i++ {
			runtime.GC()
			time.Sleep(time.Millisecond)
		}
		fmt.Println("gogc", gogc())
		return
	}
	for _, c := range []struct {
		name string
		env  []string
		want string
	}{
		{"raised without settings", nil, fmt.Sprint("gogc ", maxPercent)},
		{"GOGC set wins", []string{"GOGC=100"}, "gogc 100"},
		{"GOMEMLIMIT set wins", []string{"GOMEMLIMIT=1GiB"}, "gogc 100"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestFromEnv$", "-test.count=1")
			cmd.Env = append(withoutGC(os.Environ()), append([]string{"GCFLOOR_CHILD=1"}, c.env...)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), c.want+"\n") {
				t.Fatalf("child printed %q, want a line %q", out, c.want)
			}
		})
	}
}

func withoutGC(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, "GOGC=") && !strings.HasPrefix(e, "GOMEMLIMIT=") {
			out = append(out, e)
		}
	}
	return out
}
