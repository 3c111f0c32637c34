package norn

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestGathered(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		min    int
		linger time.Duration
		ready  int
		oldest time.Time
		now    time.Time
		take   bool
		retry  time.Time
	}{
		{"no min takes at once", 0, 0, 1, t0, t0, true, time.Time{}},
		{"min 1 is no batch", 1, 0, 1, t0, t0, true, time.Time{}},
		{"enough ready", 5, time.Second, 5, t0, t0, true, time.Time{}},
		{"too few, no linger: wait for more", 5, 0, 4, t0, t0.Add(time.Hour), false, time.Time{}},
		{"too few, lingering", 5, 2 * time.Second, 3, t0, t0.Add(time.Second), false, t0.Add(2 * time.Second)},
		{"too few, linger over", 5, 2 * time.Second, 3, t0, t0.Add(2 * time.Second), true, time.Time{}},
		{"none ready", 5, 2 * time.Second, 0, time.Time{}, t0, false, time.Time{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ClaimRequest{Min: c.min, Linger: Duration(c.linger)}
			take, retry := r.Gathered(c.ready, c.oldest, c.now)
			if take != c.take || !retry.Equal(c.retry) {
				t.Fatalf("Gathered = %v, %v; want %v, %v", take, retry, c.take, c.retry)
			}
		})
	}
}

func TestChooseGroup(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	g := func(ready int, oldest time.Duration) GroupStats {
		return GroupStats{Ready: ready, Oldest: t0.Add(oldest)}
	}
	for _, c := range []struct {
		name   string
		min    int
		linger time.Duration
		groups []GroupStats
		now    time.Time
		want   int
		retry  time.Time
	}{
		{"no groups", 3, time.Second, nil, t0, -1, time.Time{}},
		{"no min: the first group", 0, 0, []GroupStats{g(1, 0), g(5, 0)}, t0, 0, time.Time{}},
		{"first group with min", 3, 0, []GroupStats{g(2, 0), g(3, 0), g(4, 0)}, t0, 1, time.Time{}},
		{"none has min, no linger", 3, 0, []GroupStats{g(2, 0), g(1, 0)}, t0.Add(time.Hour), -1, time.Time{}},
		{"a later group lingered", 3, 10 * time.Second, []GroupStats{g(2, 5*time.Second), g(1, 0)},
			t0.Add(10 * time.Second), 1, time.Time{}},
		{"claim order wins over the linger", 3, 10 * time.Second, []GroupStats{g(3, 5*time.Second), g(1, 0)},
			t0.Add(10 * time.Second), 0, time.Time{}},
		{"lingering: retry at the earliest end", 3, 10 * time.Second, []GroupStats{g(2, 5*time.Second), g(1, 2*time.Second)},
			t0.Add(6 * time.Second), -1, t0.Add(12 * time.Second)},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := ClaimRequest{Min: c.min, Linger: Duration(c.linger), GroupBy: FairByConcurrencyKey}
			i, retry := r.ChooseGroup(c.groups, c.now)
			if i != c.want || !retry.Equal(c.retry) {
				t.Fatalf("ChooseGroup = %d, %v; want %d, %v", i, retry, c.want, c.retry)
			}
		})
	}
}

func TestGroupOf(t *testing.T) {
	labels := map[string]string{"tenant": "acme"}
	for _, c := range []struct {
		by, key, want string
	}{
		{"", "k", ""},
		{FairByConcurrencyKey, "k", "k"},
		{FairByConcurrencyKey, "", ""},
		{"label:tenant", "k", "acme"},
		{"label:region", "k", ""},
	} {
		r := ClaimRequest{GroupBy: c.by}
		if got := r.GroupOf(c.key, labels); got != c.want {
			t.Errorf("GroupBy %q: GroupOf(%q) = %q, want %q", c.by, c.key, got, c.want)
		}
	}
}

func TestClaimRequestGroupBy(t *testing.T) {
	for _, c := range []struct {
		by string
		ok bool
	}{
		{"", true}, {"concurrency_key", true}, {"label:tenant", true},
		{"tenant", false}, {"label:", false}, {"label:a:b", false},
	} {
		r := ClaimRequest{Worker: "w", Queues: []string{"q"}, GroupBy: c.by}
		err := r.Validate()
		if c.ok != (err == nil) {
			t.Errorf("group_by %q: Validate = %v", c.by, err)
		}
		if err != nil && !strings.Contains(err.Error(), "group_by") {
			t.Errorf("group_by %q: error %q does not name group_by", c.by, err)
		}
	}
}

func TestDistinctQueues(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want []string }{
		{nil, nil},
		{[]string{"a", "b"}, []string{"a", "b"}},
		{[]string{"a", "b", "a", "c", "b"}, []string{"a", "b", "c"}},
	} {
		if got := DistinctQueues(c.in); !slices.Equal(got, c.want) {
			t.Errorf("DistinctQueues(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
