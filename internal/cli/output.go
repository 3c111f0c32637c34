package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

// Output formats of -o.
const (
	outTable  = "table"
	outJSON   = "json"
	outNDJSON = "ndjson"
)

// outputFormat validates -o; an unknown format is a usage error (exit 2).
func outputFormat(g *Globals) (string, error) {
	switch f := strings.ToLower(g.Output); f {
	case "", outTable:
		return outTable, nil
	case outJSON, outNDJSON:
		return f, nil
	default:
		return "", usagef("unknown output format %q (want table, json or ndjson)", g.Output)
	}
}

// usagef builds a usage error (exit code 2).
func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// usageArgs wraps a cobra positional-argument check so that its failure
// exits with code 2 like every other usage error, and says what the
// command takes with an example instead of cobra's "requires at least 1
// arg(s)".
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		err := check(cmd, args)
		if err == nil {
			return nil
		}
		var ue *usageError
		if errors.As(err, &ue) {
			return err
		}
		name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
		msg := err.Error()
		if m := cobraArgs.FindStringSubmatch(msg); m != nil {
			verb := map[string]string{"requires at least": "needs at least", "accepts at most": "takes at most",
				"accepts between": "takes between", "accepts": "takes"}[m[1]]
			msg = fmt.Sprintf("%s %s %s argument%s, got %s", name, verb, m[2], plural(m[2]), m[3])
		} else if strings.HasPrefix(msg, "unknown command") {
			msg = fmt.Sprintf("%s takes no arguments, got %q", name, strings.Join(args, " "))
		}
		return usagef("%s; usage: %s%s", msg, cmd.UseLine(), example(cmd))
	}
}

// cobraArgs matches cobra's argument-count messages ("requires at least 1
// arg(s), only received 0", "accepts 1 arg(s), received 2").
var cobraArgs = regexp.MustCompile(`(requires at least|accepts at most|accepts between|accepts) ([0-9 and]+) arg\(s\), (?:only )?received (\d+)`)

func plural(n string) string {
	if n == "1" {
		return ""
	}
	return "s"
}

// example is the command's first example, as " (e.g. …)".
func example(cmd *cobra.Command) string {
	first, _, _ := strings.Cut(strings.TrimSpace(cmd.Example), "\n")
	if first == "" {
		return ""
	}
	return " (e.g. " + strings.TrimSpace(first) + ")"
}

// pflagInvalid matches pflag's message for a value a flag cannot parse.
var pflagInvalid = regexp.MustCompile(`^invalid argument "(.*)" for "(?:-\w, )?(--[\w-]+)" flag: (.*)$`)

// flagUsageError turns flag parse errors into usage errors (exit code 2)
// that name the flag, say what it wants and show an example, instead of
// strconv's or time's wording.
func flagUsageError(cmd *cobra.Command, err error) error {
	m := pflagInvalid.FindStringSubmatch(err.Error())
	if m == nil {
		return &usageError{msg: err.Error()}
	}
	val, flag, why := m[1], m[2], m[3]
	switch {
	case strings.Contains(why, "ParseUint"):
		return usagef("%s: %q is not a whole number of 0 or more (e.g. %s 10)", flag, val, flag)
	case strings.Contains(why, "ParseInt"):
		return usagef("%s: %q is not a whole number (e.g. %s 3)", flag, val, flag)
	case strings.Contains(why, "ParseFloat"):
		return usagef("%s: %q is not a number (e.g. %s 2.5)", flag, val, flag)
	case strings.Contains(why, "ParseBool"):
		return usagef("%s: %q is not true or false", flag, val)
	case strings.HasPrefix(why, "time: "):
		return usagef("%s: %q is not a duration: durations look like 30s, 5m, 1h30m%s", flag, val, didYouMean(val))
	}
	return usagef("%s: %q: %s", flag, val, why)
}

// durationWords reads a spelled-out duration ("5 minutes", "2 hours").
var durationWords = regexp.MustCompile(`^\s*(\d+)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?)\s*$`)

// didYouMean suggests the duration a spelled-out one means.
func didYouMean(v string) string {
	m := durationWords.FindStringSubmatch(strings.ToLower(v))
	if m == nil {
		return ""
	}
	n, _ := strconv.Atoi(m[1])
	unit := m[2]
	switch {
	case strings.HasPrefix(unit, "ms") || strings.HasPrefix(unit, "milli"):
		return fmt.Sprintf("; did you mean %dms?", n)
	case strings.HasPrefix(unit, "s"):
		return fmt.Sprintf("; did you mean %ds?", n)
	case strings.HasPrefix(unit, "m"):
		return fmt.Sprintf("; did you mean %dm?", n)
	case strings.HasPrefix(unit, "h"):
		return fmt.Sprintf("; did you mean %dh?", n)
	default: // days: Go durations stop at hours
		return fmt.Sprintf("; did you mean %dh?", n*24)
	}
}

// clientCommand finishes a client-side subcommand: usage-error exit codes
// for bad flags and arguments.
func clientCommand(cmd *cobra.Command) *cobra.Command {
	cmd.SetFlagErrorFunc(flagUsageError)
	if cmd.Args != nil {
		cmd.Args = usageArgs(cmd.Args)
	}
	return cmd
}

// serverURL is --server, with http:// put in front of a bare host:port.
func (g *Globals) serverURL() string {
	if s := strings.TrimSpace(g.Server); s != "" && !strings.Contains(s, "://") {
		return "http://" + s
	}
	return g.Server
}

// newClient connects to --server with --token.
func newClient(g *Globals) (*client.Client, error) {
	c, err := client.New(g.serverURL(), client.WithToken(g.bearerToken()), client.WithUserAgent("norn-cli/1"))
	if err != nil {
		return nil, usagef("--server: %v", err)
	}
	return c, nil
}

// withClient runs do with a client of --server and closes the client after.
func withClient(g *Globals, do func(c *client.Client) error) error {
	c, err := newClient(g)
	if err != nil {
		return err
	}
	defer c.Close()
	return explain(g, do(c))
}

// hintedError is an error with advice for the person at the terminal; it
// unwraps to the original, so exit codes and errors.Is still see it.
type hintedError struct {
	err error
	msg string
}

func (e *hintedError) Error() string { return e.msg }
func (e *hintedError) Unwrap() error { return e.err }

// explain turns the errors a new user meets first into what to do: no
// server at the URL, no token, a token that may not do this.
func explain(g *Globals, err error) error {
	if err == nil {
		return nil
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return &hintedError{err, fmt.Sprintf("no norn server answers at %s (%v): start one with 'norn server', or point --server (or NORN_SERVER) at one",
			g.serverURL(), op.Err)}
	}
	switch norn.CodeOf(err) {
	case norn.CodeUnauthenticated:
		if g.bearerToken() == "" {
			return &hintedError{err, err.Error() + ": this server wants a token; give it with --token or NORN_TOKEN"}
		}
		return &hintedError{err, err.Error() + ": the token given (--token or NORN_TOKEN) is not one this server knows"}
	case norn.CodePermissionDenied:
		return &hintedError{err, err.Error() + ": the token's role or queues do not allow this; an admin's token (--token or NORN_TOKEN) does"}
	}
	return err
}

// clientRun is the RunE of a client command with nothing of its own to
// check before it connects: the -o format is checked first, so a bad flag
// fails before any network I/O, then run gets the format and a client of
// --server (closed when run returns).
func clientRun(g *Globals, run func(cmd *cobra.Command, args []string, format string, c *client.Client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		format, err := outputFormat(g)
		if err != nil {
			return err
		}
		return withClient(g, func(c *client.Client) error { return run(cmd, args, format, c) })
	}
}

// writeJSON writes v as indented JSON followed by a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeNDJSONLine writes v as one compact JSON line.
func writeNDJSONLine(w io.Writer, v any) error {
	return json.NewEncoder(w).Encode(v)
}

// emit writes v as JSON (indented for json, one line for ndjson).
func emit(w io.Writer, format string, v any) error {
	if format == outNDJSON {
		return writeNDJSONLine(w, v)
	}
	return writeJSON(w, v)
}

// emitAll writes a list: one JSON array for json, a line per item for ndjson.
func emitAll[T any](w io.Writer, format string, items []T) error {
	if format != outNDJSON {
		return writeJSON(w, items)
	}
	for _, v := range items {
		if err := writeNDJSONLine(w, v); err != nil {
			return err
		}
	}
	return nil
}

// show prints one item: describe renders it for the table format, the other
// formats are its JSON.
func show[T any](w io.Writer, format string, v T, describe func(io.Writer, T) error) error {
	if format != outTable {
		return emit(w, format, v)
	}
	return describe(w, v)
}

// showCommand is a `get NAME`-style subcommand: fetch one item by name (a
// client method such as (*client.Client).Queue) and show it.
func showCommand[T any](g *Globals, use, short string,
	fetch func(c *client.Client, ctx context.Context, name string) (T, error),
	describe func(io.Writer, T) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: clientRun(g, func(cmd *cobra.Command, args []string, format string, c *client.Client) error {
			v, err := fetch(c, cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return show(cmd.OutOrStdout(), format, v, describe)
		}),
	}
}

// table is a tab-aligned text table. Rows are flushed in blocks so a long
// streamed listing does not buffer everything (column widths are computed
// per block).
type table struct {
	tw     *tabwriter.Writer
	header []string
	rows   int
}

// flushEvery bounds how many rows a table buffers.
const flushEvery = 500

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0), header: header}
	if len(header) > 0 {
		t.line(header)
	}
	return t
}

func (t *table) line(cells []string) {
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// row adds one row.
func (t *table) row(cells ...string) {
	t.line(cells)
	t.rows++
	if t.rows%flushEvery == 0 {
		t.tw.Flush()
	}
}

// flush writes what is buffered.
func (t *table) flush() error { return t.tw.Flush() }

// ago formats a time relative to now for tables ("3s ago", "in 5m"); the
// zero time is "-".
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d < 0 {
		return "in " + shortDuration(-d)
	}
	return shortDuration(d) + " ago"
}

// shortDuration rounds to the largest sensible unit: 45s, 12m, 3h, 5d.
func shortDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

// dash returns s, or "-" when empty, so table columns never collapse.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// formatLabels renders labels as k=v pairs sorted by key.
func formatLabels(l map[string]string) string {
	if len(l) == 0 {
		return "-"
	}
	keys := sortedKeys(l)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return strings.Join(parts, ",")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// statusCounts renders a count map in lifecycle order as columns.
func statusCounts(c map[norn.Status]int64) []string {
	out := make([]string, len(norn.AllStatuses))
	for i, s := range norn.AllStatuses {
		out[i] = fmt.Sprint(c[s])
	}
	return out
}

// statusHeader is the column header matching statusCounts.
func statusHeader() []string {
	out := make([]string, len(norn.AllStatuses))
	for i, s := range norn.AllStatuses {
		out[i] = strings.ToUpper(string(s))
	}
	return out
}

// stdinPiped reports whether stdin is a pipe or a redirected file, i.e.
// input was deliberately given. Terminals, /dev/null and sockets are not.
func stdinPiped() bool {
	fi, err := os.Stdin.Stat()
	return err == nil && (fi.Mode()&os.ModeNamedPipe != 0 || fi.Mode().IsRegular())
}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// pauseCommand is `pause NAME...` / `resume NAME...` for anything that can
// be paused (queues, schedules): set changes one by name; the table format
// says "NAME paused", the others print the changed items.
func pauseCommand[T any](g *Globals, kind string, pause bool, use, short string,
	set func(ctx context.Context, c *client.Client, name string, paused bool) (T, error)) *cobra.Command {
	verb := "resumed"
	if pause {
		verb = "paused"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: clientRun(g, func(cmd *cobra.Command, args []string, format string, c *client.Client) error {
			var out []T
			for _, name := range args {
				v, err := set(cmd.Context(), c, name, pause)
				if err != nil {
					return fmt.Errorf("%s %s: %w", kind, name, err)
				}
				out = append(out, v)
				if format == outTable {
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", name, verb)
				}
			}
			if format != outTable {
				return emitAll(cmd.OutOrStdout(), format, out)
			}
			return nil
		}),
	}
}

// nTasks is "1 task" or "N tasks".
func nTasks(n int64) string {
	if n == 1 {
		return "1 task"
	}
	return fmt.Sprintf("%d tasks", n)
}
