//go:build !unix

package server

import "time"

// processCPU is not measured here: server-cpu-ms/batch reads 0.
func processCPU() time.Duration { return 0 }
