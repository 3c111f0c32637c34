package cli

import (
	"errors"
	"strings"
	"testing"
)

// TestConfirmBulk: on a terminal the question comes with the count and
// only y/yes goes on; without one, --yes is required; --yes and nothing to
// do never ask.
func TestConfirmBulk(t *testing.T) {
	old := interactive
	defer func() { interactive = old }()
	for _, c := range []struct {
		name     string
		tty, yes bool
		n        int64
		answer   string
		ok       bool
		prompt   string
	}{
		{"yes on a terminal", true, false, 6, "y\n", true, "Delete 6 tasks? [y/N] "},
		{"YES spelled out", true, false, 1, "YES\n", true, "Delete 1 task? [y/N] "},
		{"no on a terminal", true, false, 6, "n\n", false, "Delete 6 tasks? [y/N] "},
		{"enter on a terminal", true, false, 6, "\n", false, "Delete 6 tasks? [y/N] "},
		{"no terminal", false, false, 6, "", false, ""},
		{"no terminal with --yes", false, true, 6, "", true, ""},
		{"nothing to do", false, false, 0, "", true, ""},
	} {
		interactive = func() bool { return c.tty }
		var out strings.Builder
		err := confirmBulk(strings.NewReader(c.answer), &out, "delete", c.n, c.yes)
		if (err == nil) != c.ok || out.String() != c.prompt {
			t.Errorf("%s: err %v, prompt %q; want ok %v, prompt %q", c.name, err, out.String(), c.ok, c.prompt)
		}
		var ue *usageError
		if err != nil && !errors.As(err, &ue) {
			t.Errorf("%s: %v is not a usage error", c.name, err)
		}
	}
}
