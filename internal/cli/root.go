// Package cli implements the norn command line. Each subcommand lives in its
// own file and registers itself with register, so subcommands can be added
// without touching a central list.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/nornq/norn/internal/gcfloor"
)

// Globals are the flags every client-side subcommand shares.
type Globals struct {
	// Server is the base URL of a norn server (--server / NORN_SERVER;
	// default http://127.0.0.1:7070).
	Server string
	// Token is the bearer token (--token / NORN_TOKEN).
	Token string
	// Output is the output format: table (default), json or ndjson (-o).
	Output string
}

// bearerToken is --token, or NORN_TOKEN when the flag is not given.
func (g *Globals) bearerToken() string {
	if g.Token != "" {
		return g.Token
	}
	return os.Getenv("NORN_TOKEN")
}

var registry []func(g *Globals) *cobra.Command

// register adds a subcommand constructor; call it from an init function.
func register(f func(g *Globals) *cobra.Command) { registry = append(registry, f) }

// NewRoot builds the root command with every registered subcommand.
func NewRoot() *cobra.Command {
	g := &Globals{}
	root := &cobra.Command{
		Use:           "norn",
		Short:         "Norn: a persistent task scheduling system",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.Server, "server", envOr("NORN_SERVER", "http://127.0.0.1:7070"), "norn server URL (env NORN_SERVER)")
	// The token's value must never be the flag's default: --help prints
	// defaults, and help output ends up in terminals, logs and bug reports.
	// bearerToken reads NORN_TOKEN when the flag is not given.
	tokenHelp := "bearer token (env NORN_TOKEN)"
	if os.Getenv("NORN_TOKEN") != "" {
		tokenHelp = "bearer token (env NORN_TOKEN, which is set)"
	}
	pf.StringVar(&g.Token, "token", "", tokenHelp)
	pf.StringVarP(&g.Output, "output", "o", "table", "output format: table, json or ndjson")
	cmds := make([]*cobra.Command, 0, len(registry))
	for _, f := range registry {
		cmds = append(cmds, f(g))
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name() < cmds[j].Name() })
	root.AddCommand(cmds...)
	plainUsageErrors(root)
	return root
}

// Main runs the CLI with args and returns the process exit code: 0 on
// success, 1 on errors, 2 on usage errors.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	gcfloor.FromEnv()
	root := NewRoot()
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "norn:", err)
		var ue *usageError
		if errors.As(err, &ue) {
			return 2
		}
		return 1
	}
	return 0
}

// usageError marks errors in how the command was called (exit code 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// plainUsageErrors gives every command the usage errors of usageArgs and
// flagUsageError: exit code 2, the flag or argument named, an example.
func plainUsageErrors(cmd *cobra.Command) {
	cmd.SetFlagErrorFunc(flagUsageError)
	if cmd.Args != nil {
		cmd.Args = usageArgs(cmd.Args)
	}
	for _, c := range cmd.Commands() {
		plainUsageErrors(c)
	}
}
