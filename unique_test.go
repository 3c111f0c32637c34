package norn

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

func TestValidateUniqueKey(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     NewTask
		field string // "" = valid
	}{
		{"no key", NewTask{Queue: "q"}, ""},
		{"key", NewTask{Queue: "q", UniqueKey: "user-42/report é"}, ""},
		{"key of 256 bytes", NewTask{Queue: "q", UniqueKey: strings.Repeat("k", 256)}, ""},
		{"key and window", NewTask{Queue: "q", UniqueKey: "k", UniqueFor: Duration(time.Hour)}, ""},
		{"key of 257 bytes", NewTask{Queue: "q", UniqueKey: strings.Repeat("k", 257)}, "unique_key"},
		{"newline", NewTask{Queue: "q", UniqueKey: "a\nb"}, "unique_key"},
		{"NUL", NewTask{Queue: "q", UniqueKey: "a\x00"}, "unique_key"},
		{"C1 control", NewTask{Queue: "q", UniqueKey: "a\u0085"}, "unique_key"},
		{"not UTF-8", NewTask{Queue: "q", UniqueKey: "a\xff"}, "unique_key"},
		{"window without key", NewTask{Queue: "q", UniqueFor: Duration(time.Hour)}, "unique_for"},
		{"negative window", NewTask{Queue: "q", UniqueKey: "k", UniqueFor: Duration(-time.Second)}, "unique_for"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.n.Validate()
			if c.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var ne *Error
			if !errors.As(err, &ne) || ne.Code != CodeInvalidArgument || ne.Field != c.field {
				t.Fatalf("Validate: %v; want invalid_argument on %q", err, c.field)
			}
		})
	}
}

func TestPlanUnique(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	stored := map[UniqueRef][]UniqueHolder{
		{"q", "live"}:  {{ID: "old", Status: StatusCompleted, Ended: now.Add(-time.Second)}, {ID: "L", Status: StatusRunning}},
		{"q", "ended"}: {{ID: "e1", Status: StatusCompleted, Ended: now.Add(-time.Hour)}, {ID: "e2", Status: StatusAborted, Ended: now.Add(-time.Minute)}},
		{"q", "edge"}:  {{ID: "x", Status: StatusCancelled, Ended: now.Add(-time.Minute)}},
	}
	holders := func(r UniqueRef) []UniqueHolder { return stored[r] }
	win := func(key string, d time.Duration) NewTask {
		return NewTask{Queue: "q", UniqueKey: key, UniqueFor: Duration(d)}
	}
	for _, c := range []struct {
		name    string
		tasks   []NewTask
		settled []bool
		want    map[int]string
	}{
		{"no keys", []NewTask{{Queue: "q"}, {Queue: "q"}}, nil, nil},
		{"live holder", []NewTask{win("live", 0)}, nil, map[int]string{0: "L"}},
		{"ended holders need a window", []NewTask{win("ended", 0)}, nil, nil},
		{"window takes the one that ended last", []NewTask{win("ended", 2*time.Hour)}, nil, map[int]string{0: "e2"}},
		{"window shorter than the last end", []NewTask{win("ended", 30*time.Second)}, nil, nil},
		{"window ends exactly now", []NewTask{win("edge", time.Minute)}, nil, nil},
		{"window just open", []NewTask{win("edge", time.Minute+1)}, nil, map[int]string{0: "x"}},
		{"keys are per queue", []NewTask{{Queue: "other", UniqueKey: "live"}}, nil, nil},
		{"same key twice in the batch", []NewTask{win("new", 0), win("new", 0), win("new", time.Hour)}, nil, map[int]string{1: "id0", 2: "id0"}},
		{"settled tasks are skipped", []NewTask{win("new", 0), win("new", 0)}, []bool{true, false}, nil},
		{"stored holder wins over the batch", []NewTask{win("live", 0), win("live", 0)}, nil, map[int]string{0: "L", 1: "L"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ids := make([]string, len(c.tasks))
			for i := range ids {
				ids[i] = "id" + string(rune('0'+i))
			}
			got := PlanUnique(c.tasks, ids, c.settled, now, holders)
			if !maps.Equal(got, c.want) {
				t.Fatalf("PlanUnique = %v, want %v", got, c.want)
			}
		})
	}
}
