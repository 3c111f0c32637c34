package cli

import (
	"errors"
	"reflect"
	"slices"
	"testing"
)

func TestParseWeightedQueues(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in      []string
		queues  []string
		weights map[string]int
		bad     bool
	}{
		{in: []string{"a", "b"}, queues: []string{"a", "b"}},
		{in: []string{"emails=3", "reports"}, queues: []string{"emails", "reports"}, weights: map[string]int{"emails": 3}},
		{in: []string{"a=0"}, bad: true},
		{in: []string{"a=x"}, bad: true},
		{in: []string{"a=1001"}, bad: true},
	} {
		q, w, err := parseWeightedQueues(c.in)
		var ue *usageError
		if c.bad {
			if !errors.As(err, &ue) {
				t.Errorf("%v: %v, want a usage error", c.in, err)
			}
			continue
		}
		if err != nil || !slices.Equal(q, c.queues) || !reflect.DeepEqual(w, c.weights) {
			t.Errorf("%v: %v %v %v, want %v %v", c.in, q, w, err, c.queues, c.weights)
		}
	}
}
