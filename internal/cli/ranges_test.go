package cli

import (
	"bytes"
	"strings"
	"testing"
)

// TestOutOfRangeFlagsRefused: times, durations and counts the stores
// cannot hold are usage errors naming the flag, refused before anything
// is sent (the server answers 400 too; here nothing listens).
func TestOutOfRangeFlagsRefused(t *testing.T) {
	t.Parallel()
	const late, early, huge, big = "2300-01-01T00:00:00Z", "1600-01-01T00:00:00Z", "2562047h", "2147483648"
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"submit", "q", "--run-at", late}, "--run-at"},
		{[]string{"submit", "q", "--run-at", early}, "--run-at"},
		{[]string{"submit", "q", "--delay", huge}, "--delay"},
		{[]string{"submit", "q", "--timeout", huge}, "--timeout"},
		{[]string{"submit", "q", "--max-runtime", huge}, "--max-runtime"},
		{[]string{"submit", "q", "--unique-key", "k", "--unique-for", huge}, "--unique-for"},
		{[]string{"submit", "q", "--max-attempts", big}, "--max-attempts"},
		{[]string{"submit", "q", "--retry", big}, "--retry"},
		{[]string{"submit", "q", "--retry", "1", "--retry-base", huge}, "--retry-base"},
		{[]string{"delete", "-q", "qa", "--created-after", late}, "--created-after"},
		{[]string{"delete", "-q", "qa", "--created-before", early}, "--created-before"},
		{[]string{"list", "--updated-after", late}, "--updated-after"},
		{[]string{"count", "--updated-before", early}, "--updated-before"},
		{[]string{"retry", "a", "--run-at", late}, "--run-at"},
		{[]string{"retry", "a", "--delay", huge}, "--delay"},
		{[]string{"queues", "set", "qa", "--timeout", huge}, "--timeout"},
		{[]string{"queues", "set", "qa", "--retention-completed", huge}, "--retention-completed"},
		{[]string{"queues", "set", "qa", "--max-attempts", big}, "--max-attempts"},
		{[]string{"queues", "set", "qa", "--max-running", big}, "--max-running"},
		{[]string{"schedule", "set", "s", "--cron", "@hourly", "-q", "qa", "--timeout", huge}, "--timeout"},
		{[]string{"schedule", "set", "s", "--cron", "@hourly", "-q", "qa", "--max-attempts", big}, "--max-attempts"},
	} {
		root := NewRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append(c.args, "--server", "http://127.0.0.1:1"))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), c.flag) || strings.Contains(err.Error(), "connect") {
			t.Errorf("norn %s: %v, want a usage error naming %s", strings.Join(c.args, " "), err, c.flag)
		}
	}
}
