package wire

import (
	"errors"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/nornq/norn"
)

func TestParseThroughputParams(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	start := now.Add(-norn.ThroughputWindow)
	oldest := now.Add(-norn.ThroughputKeepHourly)
	for _, tc := range []struct {
		query  string
		queues []string
		since  time.Time
		field  string // non-empty: the error must name it
	}{
		{query: "", since: start},
		{query: "since=90m", since: now.Add(-90 * time.Minute)},
		{query: "since=0s", since: now},
		{query: "since=48h", since: now.Add(-48 * time.Hour)},
		{query: "since=2400h", since: oldest},
		{query: "since=2030-01-02T02:00:00Z", since: time.Date(2030, 1, 2, 2, 0, 0, 0, time.UTC)},
		{query: "since=2029-12-01T00:00:00Z", since: time.Date(2029, 12, 1, 0, 0, 0, 0, time.UTC)},
		{query: "since=2029-01-01T00:00:00Z", since: oldest},
		{query: "queue=a&queue=b,c", queues: []string{"a", "b", "c"}, since: start},
		{query: "since=-1m", field: "since"},
		{query: "since=yesterday", field: "since"},
		{query: "since=1h&since=2h", field: "since"},
		{query: "queue=bad%20name", field: "queue"},
		{query: "limit=5", field: "limit"},
	} {
		v, _ := url.ParseQuery(tc.query)
		qs, since, err := ParseThroughputParams(v, now)
		if tc.field != "" {
			var ne *norn.Error
			if !errors.As(err, &ne) || ne.Code != norn.CodeInvalidArgument || ne.Field != tc.field {
				t.Errorf("%q: err %v, want invalid_argument naming %s", tc.query, err, tc.field)
			}
			continue
		}
		if err != nil || !since.Equal(tc.since) || !reflect.DeepEqual(qs, tc.queues) {
			t.Errorf("%q: %v %v %v, want %v %v", tc.query, qs, since, err, tc.queues, tc.since)
		}
	}
}
