//go:build unix

package proccpu

import (
	"syscall"
	"time"
)

// Used returns the user and system CPU time this process has used so far
// (0 if it cannot be read).
func Used() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
