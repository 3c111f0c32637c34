package server

import (
	"runtime"
	"testing"
)

// TestRaiseProcs: GOMAXPROCS is raised to MinProcs unless the environment
// sets it, and never lowered.
func TestRaiseProcs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	t.Setenv("GOMAXPROCS", "")
	runtime.GOMAXPROCS(1)
	if prev := RaiseProcs(); prev != 1 || runtime.GOMAXPROCS(0) != MinProcs {
		t.Fatalf("from 1: returned %d, now %d; want 1 and %d", prev, runtime.GOMAXPROCS(0), MinProcs)
	}
	runtime.GOMAXPROCS(MinProcs + 2)
	if RaiseProcs(); runtime.GOMAXPROCS(0) != MinProcs+2 {
		t.Fatalf("lowered to %d", runtime.GOMAXPROCS(0))
	}
	t.Setenv("GOMAXPROCS", "1")
	runtime.GOMAXPROCS(1)
	if RaiseProcs(); runtime.GOMAXPROCS(0) != 1 {
		t.Fatalf("raised to %d although GOMAXPROCS is set", runtime.GOMAXPROCS(0))
	}
}
