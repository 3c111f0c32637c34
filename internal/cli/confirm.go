package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// interactive reports whether a person can answer a question: stdin and
// stderr are terminals. Tests replace it.
var interactive = func() bool { return isTerminal(os.Stdin) && isTerminal(os.Stderr) }

// confirmBulk asks before a command changes n tasks by filter ("delete 6
// tasks?"): yes (--yes) skips the question; without a terminal to ask on,
// --yes is required, so a script never deletes more than it meant to by
// a filter gone wrong. what is the action in the infinitive ("delete").
func confirmBulk(in io.Reader, out io.Writer, what string, n int64, yes bool) error {
	if yes || n == 0 {
		return nil
	}
	if !interactive() {
		return usagef("this would %s %s: give --yes to confirm (there is no terminal to ask on), or --dry-run to count only", what, nTasks(n))
	}
	fmt.Fprintf(out, "%s %s? [y/N] ", strings.ToUpper(what[:1])+what[1:], nTasks(n))
	line, _ := bufio.NewReader(in).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return usagef("nothing done: not confirmed")
}
