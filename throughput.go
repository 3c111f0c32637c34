package norn

import "time"

// ThroughputWindow is how far back a server's throughput history reaches:
// GET /v1/stats/throughput answers at most this much, one point per minute.
const ThroughputWindow = 24 * time.Hour

// ThroughputPoint counts the task state changes of one minute.
type ThroughputPoint struct {
	// Minute is the start of the minute (UTC, whole minute).
	Minute time.Time `json:"t"`
	// Submitted counts new tasks (TaskSubmit).
	Submitted int64 `json:"submitted"`
	// Completed counts completions (TaskComplete).
	Completed int64 `json:"completed"`
	// Failed counts failed attempts: a failure scheduled for retry
	// (TaskRetry), a timeout (TaskTimeout) and an abort (TaskAbort).
	Failed int64 `json:"failed"`
}

// Throughput is a per-minute history of task activity, as a server
// recorded it from the store's events (docs/api.md, GET /v1/stats/throughput).
type Throughput struct {
	// Queues are the queues counted; empty means every queue the caller
	// may see.
	Queues []string `json:"queues,omitempty"`
	// Since is the first minute covered and Until the minute under way
	// (its point, if any, is still growing).
	Since time.Time `json:"since"`
	Until time.Time `json:"until"`
	// RecordingSince is when this server started recording: minutes
	// before it are unknown to it, not idle.
	RecordingSince time.Time `json:"recording_since"`
	// Points are the minutes with any activity, oldest first; a minute
	// between Since and Until that has no point had none.
	Points []ThroughputPoint `json:"points"`
}
