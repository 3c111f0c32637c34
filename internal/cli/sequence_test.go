package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nornq/norn"
)

func TestShellWord(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"account-7":         "account-7",
		"0193b2f4-7c1e:a/b": "0193b2f4-7c1e:a/b",
		"acct 7":            "'acct 7'",
		"it's":              `'it'\''s'`,
		"$(rm)":             "'$(rm)'",
		"":                  "''",
	} {
		if got := shellWord(in); got != want {
			t.Errorf("shellWord(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestDescribeSequence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   norn.SequenceInfo
		want []string
		not  string
	}{
		{"empty", norn.SequenceInfo{Queue: "q", Key: "k"}, []string{"head:", "none", "halted:", "no", "waiting:", "0"}, "to go on"},
		{"running", norn.SequenceInfo{Queue: "q", Key: "k", Head: "h", HeadStatus: norn.StatusRunning, Waiting: 3}, []string{"h (running)", "waiting:", "3"}, "to go on"},
		{"halted", norn.SequenceInfo{Queue: "q", Key: "k", Head: "h 1", HeadStatus: norn.StatusAborted, Halted: true, Waiting: 2},
			[]string{"h 1 (aborted)", "halted:", "yes", "norn retry 'h 1'", "norn delete 'h 1'"}, ""},
	} {
		var b bytes.Buffer
		if err := describeSequence(&b, tc.in); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: output lacks %q:\n%s", tc.name, w, out)
			}
		}
		if tc.not != "" && strings.Contains(out, tc.not) {
			t.Errorf("%s: output has %q:\n%s", tc.name, tc.not, out)
		}
	}
}
