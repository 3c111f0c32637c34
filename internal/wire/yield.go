package wire

import "runtime"

// yieldStride is how many items a long loop over a request's or an
// answer's items handles between yields: a few hundred tasks, well under
// a millisecond.
const yieldStride = 256

// YieldEvery lets other goroutines run every yieldStride items of a long
// loop. Go preempts a running goroutine only after 10 ms: on a machine
// with few cores, a client decoding or encoding a batch of thousands of
// tasks would otherwise hold a core that long, and a small request
// arriving meanwhile would wait for it.
func YieldEvery(i int) {
	if i%yieldStride == yieldStride-1 {
		runtime.Gosched()
	}
}
