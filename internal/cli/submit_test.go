package cli

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/spf13/pflag"
)

func TestParseLabels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      []string
		want    map[string]string
		wantErr string
	}{
		{in: []string{"a=1", "b:2", "c=x=y", "d="}, want: map[string]string{"a": "1", "b": "2", "c": "x=y", "d": ""}},
		{in: []string{"noequals"}, wantErr: "key=value"},
		{in: []string{"=v"}, wantErr: "empty key"},
		{in: []string{"a=1", "a=2"}, wantErr: "twice"},
		{in: []string{"a,b=1"}, wantErr: "must not contain"},
	}
	for _, tc := range tests {
		got, err := parseLabels(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseLabels(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Errorf("parseLabels(%q) = %v, %v", tc.in, got, err)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("parseLabels(%q)[%q] = %q, want %q", tc.in, k, got[k], v)
			}
		}
	}
}

func FuzzParseLabels(f *testing.F) {
	f.Add("a=1", "b:2")
	f.Add("=", "x")
	f.Add("k=v=w", ":")
	f.Fuzz(func(t *testing.T, a, b string) {
		got, err := parseLabels([]string{a, b})
		if err != nil {
			return
		}
		if err := norn.ValidateLabels("labels", got); err != nil {
			t.Fatalf("accepted labels that the store would refuse: %v", err)
		}
		for k := range got {
			if k == "" || strings.ContainsAny(k, "=:") {
				t.Fatalf("bad key %q", k)
			}
		}
	})
}

func TestParseBatchLine(t *testing.T) {
	t.Parallel()
	nt, err := parseBatchLine([]byte(`{"spec":{"n":1},"priority":3,"labels":{"a":"b"},"delay":"5s"}`), "dq")
	if err != nil || nt.Queue != "dq" || nt.Priority != 3 || string(nt.Spec) != `{"n":1}` || nt.Delay.D().Seconds() != 5 {
		t.Fatalf("parseBatchLine = %+v, %v", nt, err)
	}
	for _, bad := range []string{
		`{"queue":"q","prioritty":1}`, // unknown field
		`{"queue":"q"} {"queue":"r"}`, // two values
		`{"queue":"q"} x`,             // trailing garbage
		`["q"]`,                       // not an object
		`{"spec":1}`,                  // no queue, no default
		`{"queue":"q","delay":5}`,     // bare number duration
		`{"queue":"bad queue"}`,       // invalid queue
		`{"queue":"q","priority":-1}`, // out of range
	} {
		if _, err := parseBatchLine([]byte(bad), ""); err == nil {
			t.Errorf("parseBatchLine(%s) accepted", bad)
		}
	}
}

func FuzzParseBatchLine(f *testing.F) {
	f.Add([]byte(`{"queue":"q","spec":{"a":[1,2]},"labels":{"k":"v"},"depends_on":["x"]}`), "")
	f.Add([]byte(`{"id":"a/b","queue":"q"}`), "q")
	f.Add([]byte(`{"retry":{"max_retries":2,"base":"1s"},"timeout":"3s"}`), "dq")
	f.Fuzz(func(t *testing.T, line []byte, dq string) {
		nt, err := parseBatchLine(line, dq)
		if err != nil {
			return
		}
		// Whatever the decoder accepts must be a valid submission.
		if err := nt.Validate(); err != nil {
			t.Fatalf("accepted an invalid task: %v", err)
		}
	})
}

func TestAtLineNamesTheInputLine(t *testing.T) {
	t.Parallel()
	err := atLine(norn.Invalid("tasks[1].depends_on[0]", "unknown"), []int{3, 7})
	var ne *norn.Error
	if !errors.As(err, &ne) || ne.Field != "line 7, depends_on[0]" {
		t.Fatalf("atLine = %v", err)
	}
	if err := atLine(norn.Invalid("tasks[9]", "x"), []int{1}); err.(*norn.Error).Field != "tasks[9]" {
		t.Fatalf("out-of-range index rewritten: %v", err)
	}
}

// The retry flags are shared by submit, queues set and schedule set.
func TestRetryFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args    []string
		want    *norn.RetryPolicy
		wantErr string
	}{
		{args: nil},
		{args: []string{"--retry", "3"}, want: &norn.RetryPolicy{MaxRetries: 3, Base: norn.Duration(time.Second), Max: norn.Duration(time.Hour)}},
		{args: []string{"--retry", "0", "--retry-base", "5s", "--retry-max", "0"}, want: &norn.RetryPolicy{Base: norn.Duration(5 * time.Second)}},
		{args: []string{"--retry", "2", "--retry-jitter", "equal"}, want: &norn.RetryPolicy{MaxRetries: 2, Base: norn.Duration(time.Second), Max: norn.Duration(time.Hour), Jitter: norn.JitterEqual}},
		{args: []string{"--retry-base", "5s"}, wantErr: "--retry-base, --retry-max and --retry-jitter need --retry, e.g. --retry 5 --retry-jitter full"},
		{args: []string{"--retry-max", "1m"}, wantErr: "--retry-base, --retry-max and --retry-jitter need --retry, e.g. --retry 5 --retry-jitter full"},
		{args: []string{"--retry-jitter", "full"}, wantErr: "--retry-base, --retry-max and --retry-jitter need --retry, e.g. --retry 5 --retry-jitter full"},
		{args: []string{"--retry", "2", "--retry-jitter", "random"}, wantErr: `--retry-jitter: "random" is not a jitter mode: use none, full or equal`},
		{args: []string{"--retry", "-1"}, wantErr: "--retry must not be negative"},
	}
	for _, tc := range tests {
		fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
		var rf retryFlags
		rf.add(fs, "retries")
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		got, err := rf.policy(fs)
		var ue *usageError
		switch {
		case tc.wantErr != "":
			if !errors.As(err, &ue) || err.Error() != tc.wantErr {
				t.Errorf("%q: error %v, want usage error %q", tc.args, err, tc.wantErr)
			}
		case err != nil || !reflect.DeepEqual(got, tc.want):
			t.Errorf("%q: policy %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
}

func TestGivenCount(t *testing.T) {
	t.Parallel()
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	n := fs.Int("max-attempts", 0, "")
	if got, err := givenCount(fs, "max-attempts", *n); got != nil || err != nil {
		t.Fatalf("flag not given: %v, %v; want nil, nil", got, err)
	}
	if err := fs.Parse([]string{"--max-attempts", "0"}); err != nil {
		t.Fatal(err)
	}
	if got, err := givenCount(fs, "max-attempts", *n); got == nil || *got != 0 || err != nil {
		t.Fatalf("--max-attempts 0: %v, %v; want 0 (given: unlimited)", got, err)
	}
	if err := fs.Parse([]string{"--max-attempts", "-2"}); err != nil {
		t.Fatal(err)
	}
	if _, err := givenCount(fs, "max-attempts", *n); err == nil || err.Error() != "--max-attempts must not be negative" {
		t.Fatalf("--max-attempts -2: %v", err)
	}
}
