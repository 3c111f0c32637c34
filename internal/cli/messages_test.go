package cli

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

// TestUsageMessages: the mistakes a new user makes first get a message
// that names the flag or argument, says what is wanted and shows an
// example; all are usage errors (exit code 2). None needs a server.
func TestUsageMessages(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"get"}, "get needs at least 1 argument, got 0; usage: norn get ID... [flags] (e.g. norn get "},
		{[]string{"schedule", "get"}, "schedule get takes 1 argument, got 0; usage: norn schedule get NAME [flags]"},
		{[]string{"count", "extra"}, `count takes no arguments, got "extra"; usage: norn count [flags] (e.g. norn count -q emails -s pending)`},
		{[]string{"submit", "q", "--priority", "-1"}, `--priority: "-1" is not a whole number of 0 or more (e.g. --priority 10)`},
		{[]string{"submit", "q", "--delay", "5 minutes"}, `--delay: "5 minutes" is not a duration: durations look like 30s, 5m, 1h30m; did you mean 5m?`},
		{[]string{"submit", "q", "--delay", "2 days"}, "did you mean 48h?"},
		{[]string{"submit", "q", `{"a": 1,}`}, "the spec is not valid JSON at line 1, column 9"},
		{[]string{"submit", "q", "hello"}, "a text spec needs quotes, e.g. norn submit q '\"hello\"'"},
		{[]string{"submit", "q", "--retry-jitter", "full"}, "--retry-base, --retry-max and --retry-jitter need --retry"},
		{[]string{"work", "-q", "a=0", "--", "true"}, "-q a=0: the weight must be a whole number from 1 to 1000"},
		{[]string{"copy", "--from", "embedded:x"}, "give both --from STORE and --to STORE"},
	} {
		root := NewRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(c.args)
		err := root.ExecuteContext(context.Background())
		var ue *usageError
		if c.args[0] == "copy" {
			// an invalid-argument error, not a usage one: it comes from norn
			ue = &usageError{}
			if err == nil {
				err = errors.New("no error")
			}
		} else if !errors.As(err, &ue) {
			t.Errorf("%q: %v, want a usage error", c.args, err)
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.args, err, c.want)
		}
	}
}
