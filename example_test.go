package norn_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/nornq/norn"
)

// A schedule's cron expression is read in its time zone; Next gives the
// ticks it fires at.
func ExampleParseCron() {
	c, err := norn.ParseCron("cron", "0 3 * * 1-5", "Europe/Berlin")
	if err != nil {
		panic(err)
	}
	t := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC) // a Friday
	for range 2 {
		t = c.Next(t)
		fmt.Println(t.In(c.Location()).Format("Mon 2006-01-02 15:04 MST"))
	}
	// Output:
	// Mon 2026-11-30 03:00 CET
	// Tue 2026-12-01 03:00 CET
}

// A failed attempt is retried after base·2ⁿ, capped at max, until the
// retries are used up; then the task aborts.
func ExampleAfterFailure() {
	t := &norn.Task{Retry: &norn.RetryPolicy{MaxRetries: 2, Base: norn.Duration(time.Second), Max: norn.Duration(time.Minute)}}
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for attempt := 1; attempt <= 3; attempt++ {
		t.Attempts = attempt
		o := norn.AfterFailure(t, now, norn.ErrorInfo{Code: "smtp_down"})
		if o.Status == norn.StatusAborted {
			fmt.Printf("attempt %d failed: %s\n", attempt, o.Status)
			break
		}
		fmt.Printf("attempt %d failed: %s, runs again in %s\n", attempt, o.Status, o.RunAt.Sub(now))
	}
	// Output:
	// attempt 1 failed: scheduled, runs again in 1s
	// attempt 2 failed: scheduled, runs again in 2s
	// attempt 3 failed: aborted
}

// Bad input is refused with an error naming the field; errors.Is tells
// the kind.
func ExampleNewTask_Validate() {
	nt := norn.NewTask{Queue: "emails!", Priority: 1}
	err := nt.Validate()
	var ne *norn.Error
	if errors.As(err, &ne) {
		fmt.Println(ne.Field, errors.Is(err, norn.ErrInvalidArgument))
	}
	// Output: queue true
}
