package wire

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// TestQueuePatchRoundTrip: a domain update sent by the Go client
// (FromQueueUpdate) is applied exactly as in process, whatever the queue
// holds now: every nested member it carries is named.
func TestQueuePatchRoundTrip(t *testing.T) {
	d := func(s int) norn.Duration { return norn.Duration(time.Duration(s) * time.Second) }
	cur := norn.QueueInfo{Defaults: norn.QueueDefaults{Retry: &norn.RetryPolicy{MaxRetries: 9, Base: d(9), Max: d(99)},
		Retention: norn.Retention{Completed: d(1), Aborted: d(2), Cancelled: d(3)}},
		QueueFlow: norn.QueueFlow{RateLimit: norn.RateLimit{PerSecond: 5, Burst: 9}},
		Keys:      []norn.KeyInfo{{Key: "k", KeySettings: norn.KeySettings{Limit: 9, Weight: 9}}}}
	for _, u := range []norn.QueueUpdate{
		{Retry: &norn.RetryPolicy{MaxRetries: 1}},
		{Retry: &norn.RetryPolicy{}},
		{Retention: &norn.Retention{Completed: d(5)}},
		{RateLimit: &norn.RateLimit{PerSecond: 2}},
		{RateLimit: &norn.RateLimit{}},
		{Keys: map[string]*norn.KeySettings{"k": {Weight: 2}, "gone": nil}},
		{Paused: new(true), Timeout: new(d(4))},
	} {
		var p QueuePatch
		if err := DecodeStrict(mustJSON(t, FromQueueUpdate(u)), &p, ""); err != nil {
			t.Fatal(err)
		}
		if got := p.Update(cur); !reflect.DeepEqual(got, u) {
			t.Errorf("%+v came back as %+v", u, got)
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
