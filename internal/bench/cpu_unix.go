//go:build unix

package bench

import (
	"syscall"
	"time"
)

// cpuTime returns the user+system CPU time this process has used so far.
// Differences of it measure what a workload cost in CPU, which — unlike
// wall time — does not depend on what else the machine is running.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
