package storetest

import (
	"os"
	"strconv"
	"testing"
)

// Options tunes Run for slow stores. The zero value runs everything at full
// size, which is what every store must pass in CI.
type Options struct {
	// StreamTasks is how many tasks the constant-memory streaming test
	// writes. 0 means 100,000 (or env NORN_STORETEST_STREAM_TASKS).
	StreamTasks int
}

// Run runs the conformance suite against stores made by f. The suite is a
// tree of subtests named Operation/Behaviour (Claim/SkipsAPausedQueue), so a
// failure names what broke. Every behaviour gets its own store and
// FakeClock from setup and runs in parallel with the others, except the
// memory measurement of streaming, which runs alone first (its heap figures
// would be meaningless next to other subtests). Call Run from a
// non-parallel top-level test for the same reason.
func Run(t *testing.T, f Factory) { RunWith(t, f, Options{}) }

// RunWith is Run with options.
func RunWith(t *testing.T, f Factory, o Options) {
	if o.StreamTasks == 0 {
		o.StreamTasks = 100_000
		if v, err := strconv.Atoi(os.Getenv("NORN_STORETEST_STREAM_TASKS")); err == nil && v > 0 {
			o.StreamTasks = v
		}
	}
	setup := newSetup(f)
	exerciseStream(t, setup, o.StreamTasks)
	for _, exercise := range []func(*testing.T, setupFunc){
		exerciseSubmit, exerciseCancel, exerciseCancelMatching, exerciseUpdate, exerciseDelete, exerciseUnknownTask, exerciseTransact,
		exerciseDependencies, exerciseDependencyResults, exerciseUnique,
		exerciseList, exerciseFilter, exerciseDependsOnFilter,
		exerciseRegisterWorker, exerciseClaim, exerciseClaimWeights, exerciseHeartbeat, exerciseLog, exerciseFinish, exerciseTimeout,
		exerciseLeaseBatch, exerciseFencing, exerciseRepeatedCall, exerciseSnooze, exerciseAwait, exerciseSignals, exerciseRetry,
		exerciseMaxRuntime, exerciseExpiry,
		exerciseQueues, exerciseSubscribe, exerciseInvalidInput, exerciseClose,
		exerciseSchedules, exerciseReadLog, exerciseFlow, exerciseTrace,
		exerciseRanges, exerciseThroughput, exerciseImport, exerciseBatches, exerciseSequences, exerciseDebounce, exerciseBatchClaims,
	} {
		exercise(t, setup)
	}
}
