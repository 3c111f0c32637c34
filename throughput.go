package norn

import (
	"context"
	"fmt"
	"time"
)

// ThroughputWindow is how far back a server's memory of throughput reaches,
// and the window GET /v1/stats/throughput answers by default. A store that
// keeps history (ThroughputStore) answers back to ThroughputKeepHourly.
const ThroughputWindow = 24 * time.Hour

// ThroughputPoint counts the task state changes of one minute (or one hour,
// see Throughput.Step).
type ThroughputPoint struct {
	// Minute is the start of the minute (UTC, whole minute).
	Minute time.Time `json:"t"`
	// Submitted counts new tasks (TaskSubmit).
	Submitted int64 `json:"submitted"`
	// Completed counts completions (TaskComplete).
	Completed int64 `json:"completed"`
	// Failed counts failed attempts: a failure scheduled for retry
	// (TaskRetry), a timeout (TaskTimeout), an abort (TaskAbort) and an
	// expiry (TaskExpire).
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
	// Step is what a point counts: one minute, or one hour when Since is
	// more than ThroughputKeep ago (points are then hours, Minute their
	// start).
	Step Duration `json:"step"`
	// RecordingSince is when recording started: minutes before it are
	// unknown, not idle. With a store that keeps history it is the first
	// minute stored in the window (or this server's start, if earlier);
	// otherwise this server's start.
	RecordingSince time.Time `json:"recording_since"`
	// Points are the minutes with any activity, oldest first; a minute
	// between Since and Until that has no point had none.
	Points []ThroughputPoint `json:"points"`
}

// How long a store keeps throughput history: ThroughputKeep at one-minute
// resolution, then summed into hours until ThroughputKeepHourly.
const (
	ThroughputKeep       = 7 * 24 * time.Hour
	ThroughputKeepHourly = 90 * 24 * time.Hour
)

// ThroughputRecord is one step (a minute or an hour) of one queue's counts
// as a store keeps them; Queue "" counts every queue together.
type ThroughputRecord struct {
	Queue string
	// Step is time.Minute or time.Hour.
	Step time.Duration
	// At is the start of the step (UTC, whole step).
	At                           time.Time
	Submitted, Completed, Failed int64
}

// ThroughputStore is implemented by the stores that keep throughput
// history (both of Norn's). Servers count the store's events in memory and
// write each closed minute; every node of a cluster counts the same events
// and writes the same minutes, so a store keeps, per count, the largest
// value written: the nodes' writes agree, and a node that started late (and
// counted less) lowers nothing.
type ThroughputStore interface {
	// SaveThroughput stores minutes (Step time.Minute), keeping the larger
	// of each count where a minute is already stored.
	SaveThroughput(ctx context.Context, recs []ThroughputRecord) error
	// LoadThroughput returns the records of the queues (nil: every one,
	// "" included) with At in [since, until), ordered by queue, step and
	// time.
	LoadThroughput(ctx context.Context, queues []string, since, until time.Time) ([]ThroughputRecord, error)
	// CompactThroughput sums the minutes before minuteBefore into their
	// hours and removes them, and removes the hours before hourBefore. Two
	// servers compacting at once count each minute once.
	CompactThroughput(ctx context.Context, minuteBefore, hourBefore time.Time) error
}

// Add adds the counts of o to r.
func (r *ThroughputRecord) Add(o ThroughputRecord) {
	r.Submitted += o.Submitted
	r.Completed += o.Completed
	r.Failed += o.Failed
}

// Max keeps in r the larger of each count of r and o.
func (r *ThroughputRecord) Max(o ThroughputRecord) {
	r.Submitted = max(r.Submitted, o.Submitted)
	r.Completed = max(r.Completed, o.Completed)
	r.Failed = max(r.Failed, o.Failed)
}

// Zero reports whether r counts nothing.
func (r ThroughputRecord) Zero() bool { return r.Submitted == 0 && r.Completed == 0 && r.Failed == 0 }

// ValidateThroughput checks records before a store keeps them: a queue
// name ("" for all), a step of a minute, a whole-minute time the stores
// can hold, and counts that are not negative.
func ValidateThroughput(recs []ThroughputRecord) error {
	for i, r := range recs {
		f := fmt.Sprintf("throughput[%d]", i)
		if r.Queue != "" {
			if err := ValidateQueue(f+".queue", r.Queue); err != nil {
				return err
			}
		}
		if r.Step != time.Minute {
			return Invalid(f+".step", "must be one minute, got %s", r.Step)
		}
		if err := ValidateTime(f+".at", r.At); err != nil {
			return err
		}
		if !r.At.Equal(r.At.Truncate(time.Minute)) {
			return Invalid(f+".at", "must be a whole minute, got %s", r.At.Format(time.RFC3339Nano))
		}
		if r.Submitted < 0 || r.Completed < 0 || r.Failed < 0 {
			return Invalid(f, "counts must not be negative")
		}
	}
	return nil
}
