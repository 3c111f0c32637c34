package norn

import (
	"reflect"
	"testing"
	"time"
)

func TestQueueUpdateApplyDefaults(t *testing.T) {
	t.Parallel()
	sec := func(n int) *Duration { d := Duration(time.Duration(n) * time.Second); return &d }
	three := 3
	pol := RetryPolicy{MaxRetries: 2, Base: Duration(time.Second)}
	start := func() QueueDefaults {
		d := DefaultQueueDefaults()
		d.Retry = &RetryPolicy{MaxRetries: 9}
		return d
	}
	for _, c := range []struct {
		name string
		u    QueueUpdate
		want func(d *QueueDefaults)
	}{
		{"nothing set changes nothing", QueueUpdate{}, func(*QueueDefaults) {}},
		{"timeout", QueueUpdate{Timeout: sec(30)}, func(d *QueueDefaults) { d.Timeout = *sec(30) }},
		{"retry", QueueUpdate{Retry: &pol}, func(d *QueueDefaults) { d.Retry = &pol }},
		{"a zero retry policy is kept: never retry", QueueUpdate{Retry: &RetryPolicy{}}, func(d *QueueDefaults) { d.Retry = &RetryPolicy{} }},
		{"max attempts", QueueUpdate{MaxAttempts: &three}, func(d *QueueDefaults) { d.MaxAttempts = 3 }},
		{"max runtime", QueueUpdate{MaxRuntime: sec(60)}, func(d *QueueDefaults) { d.MaxRuntime = *sec(60) }},
		{"retention", QueueUpdate{Retention: &Retention{Completed: *sec(5)}}, func(d *QueueDefaults) { d.Retention = Retention{Completed: *sec(5)} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, want := start(), start()
			c.u.ApplyDefaults(&got)
			c.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("ApplyDefaults: %+v, want %+v", got, want)
			}
		})
	}
	t.Run("the policy is copied", func(t *testing.T) {
		p := RetryPolicy{MaxRetries: 1}
		var d QueueDefaults
		(&QueueUpdate{Retry: &p}).ApplyDefaults(&d)
		p.MaxRetries = 5
		if d.Retry.MaxRetries != 1 {
			t.Fatalf("the update's policy is shared with the defaults")
		}
	})
}
