package proccpu

import (
	"runtime"
	"testing"
	"time"
)

// TestUsedGrowsWithWork: spinning for a while shows up as CPU time used.
func TestUsedGrowsWithWork(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("not measured on this system")
	}
	start := Used()
	x := 0
	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
		x++
	}
	if got := Used() - start; got < 10*time.Millisecond {
		t.Fatalf("50 ms of spinning used %v of CPU (x=%d)", got, x)
	}
}
