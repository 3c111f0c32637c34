package server

import (
	"os"
	"runtime"
)

// MinProcs is the least GOMAXPROCS a server process should run with.
//
// Go hands a goroutine that became runnable (a request whose bytes
// arrived) to a free P, or queues it behind the goroutines that hold the
// Ps; those are preempted only after 10 ms. With GOMAXPROCS 2 on a 2-core
// machine, a client submitting batches of 2,000 tasks in a loop kept both
// Ps busy with decoding, the store's write and the collector, and an
// ordinary GET waited behind them: p99 10–13 ms
// (BenchmarkNormalClientUnderAbuse, docs/benchmarks.md). With 4 Ps the
// request's goroutine gets a P at once and its thread competes for a
// core under the kernel's scheduler, whose time slices are much shorter:
// p99 4.0–4.8 ms, with no measurable change in throughput. On machines
// with 4 or more cores this changes nothing.
const MinProcs = 4

// RaiseProcs raises GOMAXPROCS to MinProcs when it is lower and the
// GOMAXPROCS environment variable does not set it (an operator's choice
// wins), and returns the value before. `norn server` calls it at start; a
// program embedding the server may.
func RaiseProcs() int {
	prev := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") == "" && prev < MinProcs {
		runtime.GOMAXPROCS(MinProcs)
	}
	return prev
}
