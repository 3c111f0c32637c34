package cli

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/nornq/norn"
)

func TestCallbackFlags(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		queue, spec string
		want        string // the callback's queue and spec, "nil" for none
		err         string
	}{
		{"", "", "nil", ""},
		{"reports", "", "reports ", ""},
		{"reports", ` {"a":1} `, `reports {"a":1}`, ""},
		{"", "{}", "", "--on-complete-spec needs --on-complete-queue"},
		{"reports", "{", "", "not valid JSON"},
		{"reports", "hello", "", "not valid JSON"},
	} {
		nt, err := callbackFlags("on-complete", c.queue, c.spec)
		got := "nil"
		if nt != nil {
			got = nt.Queue + " " + string(nt.Spec)
		}
		var ue *usageError
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !errors.As(err, &ue)):
			t.Errorf("callbackFlags(%q, %q) = %v, want usage error %q", c.queue, c.spec, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("callbackFlags(%q, %q) = %q, %v; want %q", c.queue, c.spec, got, err, c.want)
		}
	}
}

func TestBatchFlagNamed(t *testing.T) {
	t.Parallel()
	for field, want := range map[string]string{
		"id":                     "--id: m",
		"labels":                 "--label: m",
		"on_complete.queue":      "--on-complete-queue: m",
		"on_success.spec":        "--on-success-spec: m",
		"on_success.max_runtime": "--on-success-queue: m",
	} {
		if got := batchFlagNamed(norn.Invalid(field, "m")).Error(); got != want {
			t.Errorf("field %s: %q, want %q", field, got, want)
		}
	}
}

func TestParseBatchFile(t *testing.T) {
	t.Parallel()
	nb, err := parseBatchFile([]byte(`{"id":"b","labels":{"k":"v"},"on_complete":{"queue":"r","spec":{"x":1}},"seal":true,
		"tasks":[{"queue":"w"},{"queue":"w","batch":"b"}]}`))
	if err != nil || nb.ID != "b" || !nb.Seal || nb.OnComplete.Queue != "r" || len(nb.Tasks) != 2 || nb.Labels["k"] != "v" {
		t.Fatalf("parseBatchFile = %+v, %v", nb, err)
	}
	for _, bad := range []string{
		`{"id":"b","seel":true}`,                // unknown field
		`{"id":"b"} {}`,                         // two values
		`["b"]`,                                 // not an object
		`{"id":"a b"}`,                          // invalid id
		`{"on_success":{"queue":"r","id":"x"}}`, // a callback's id is Norn's
		`{"id":"b","tasks":[{"queue":"w","batch":"c"}]}`, // a member of another batch
		``,
	} {
		var ue *usageError
		if _, err := parseBatchFile([]byte(bad)); err == nil || !errors.As(err, &ue) {
			t.Errorf("parseBatchFile(%s) = %v, want a usage error", bad, err)
		}
	}
}

func FuzzParseBatchFile(f *testing.F) {
	f.Add(`{"id":"b","on_complete":{"queue":"r"},"tasks":[{"queue":"w"}]}`)
	f.Add(`{"on_success":{"queue":"r","labels":{"norn.batch":"x"}}}`)
	f.Add(`{}`)
	f.Fuzz(func(t *testing.T, s string) {
		nb, err := parseBatchFile([]byte(s))
		if err != nil {
			return
		}
		// What is accepted is sent as its JSON: that must read back the same.
		raw, err := json.Marshal(nb)
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseBatchFile(raw)
		if err != nil {
			t.Fatalf("accepted %q, but not its own encoding %s: %v", s, raw, err)
		}
		if raw2, _ := json.Marshal(again); string(raw2) != string(raw) {
			t.Fatalf("%s reads back as %s", raw, raw2)
		}
	})
}
