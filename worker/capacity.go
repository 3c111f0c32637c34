package worker

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
)

// LoadBelow returns a Config.Capacity callback that allows claiming while
// the one-minute load average per CPU is below limit (e.g. 0.8). It reads
// /proc/loadavg; where that does not exist (not Linux) it always allows.
func LoadBelow(limit float64) func() bool {
	cpus := float64(runtime.NumCPU())
	return func() bool {
		b, err := os.ReadFile("/proc/loadavg")
		if err != nil {
			return true
		}
		load, ok := parseLoadavg(b)
		return !ok || load/cpus < limit
	}
}

// parseLoadavg reads the first field of /proc/loadavg.
func parseLoadavg(b []byte) (float64, bool) {
	f := bytes.Fields(b)
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(f[0]), 64)
	return v, err == nil
}
