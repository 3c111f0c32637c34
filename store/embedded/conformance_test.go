package embedded

import (
	"testing"

	"github.com/nornq/norn"
	"github.com/nornq/norn/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock norn.Clock) norn.Store {
		// ManualSweep: with a fake clock only Sweep may run the duties.
		return newTestStore(t, Options{Clock: clock, ManualSweep: true})
	})
}
