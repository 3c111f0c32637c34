package cli

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
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

// bulkByFilter is the filter branch of retry and cancel: count what the
// filter would change, print that for a dry run, else ask (confirmBulk)
// and act; result builds the JSON answer from the count and dry-run flag.
func bulkByFilter(cmd *cobra.Command, format, verb, past string, dryRun, yes bool,
	count func() (int64, error), act func() (int64, error), result func(n int64, dry bool) any) error {
	var n int64
	if dryRun || !yes {
		// Counted only to show or to ask: with --yes the action counts.
		var err error
		if n, err = count(); err != nil {
			return err
		}
	}
	if !dryRun {
		if err := confirmBulk(cmd.InOrStdin(), cmd.ErrOrStderr(), verb, n, yes); err != nil {
			return err
		}
		var err error
		if n, err = act(); err != nil {
			return err
		}
	}
	w := cmd.OutOrStdout()
	switch {
	case format != outTable:
		return emit(w, format, result(n, dryRun))
	case dryRun:
		fmt.Fprintf(w, "would %s %s\n", verb, nTasks(n))
	default:
		fmt.Fprintf(w, "%s %s\n", past, nTasks(n))
	}
	return nil
}
