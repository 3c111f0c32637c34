//go:build !unix

package bench

import "time"

// cpuTime is unavailable here; CPU figures are then left out (zero).
func cpuTime() time.Duration { return 0 }
