package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		var halted bool
		var after string
		var limit int
		cmd := &cobra.Command{
			Use:   "sequence QUEUE [KEY]",
			Short: "Show a sequence (its head, whether it is halted, how many wait), or list a queue's",
			Long: `Show the sequence of QUEUE and KEY: the tasks submitted to QUEUE with
--sequence-key KEY, which run one at a time in submit order. The head is the
one member that may run now; the others wait, blocked.

A head that ended aborted halts the sequence (unless the queue is set with
--sequence-on-failure continue): retry the head to run it again, or delete it
to move on to the next member. A sequence nobody used shows no head.

Without KEY, list QUEUE's sequences that have a head, by key (--halted: only
the halted ones; --after and --limit page through them).`,
			Example: `  norn sequence ledger account-7
  norn sequence ledger account-7 -o json
  norn sequence ledger --halted`,
			Args: cobra.RangeArgs(1, 2),
			RunE: clientRun(g, func(cmd *cobra.Command, args []string, format string, c *client.Client) error {
				if len(args) == 1 {
					list, err := c.Sequences(cmd.Context(), args[0], norn.SequenceQuery{Halted: halted, After: after, Limit: limit})
					if err != nil {
						return err
					}
					return show(cmd.OutOrStdout(), format, list, describeSequences)
				}
				if halted || after != "" || limit != 0 {
					return usagef("--halted, --after and --limit list a queue's sequences: give QUEUE alone")
				}
				s, err := c.Sequence(cmd.Context(), args[0], args[1])
				if err != nil {
					return err
				}
				return show(cmd.OutOrStdout(), format, s, describeSequence)
			}),
		}
		cmd.Flags().BoolVar(&halted, "halted", false, "list only halted sequences")
		cmd.Flags().StringVar(&after, "after", "", "list the keys after this one")
		cmd.Flags().IntVar(&limit, "limit", 0, "list at most this many (default 100, max 1000)")
		return clientCommand(cmd)
	})
}

func describeSequences(w io.Writer, list []norn.SequenceInfo) error {
	if len(list) == 0 {
		_, err := fmt.Fprintln(w, "no sequence with a head")
		return err
	}
	tab := newTable(w, "KEY", "HEAD", "STATUS", "HALTED", "WAITING")
	for _, s := range list {
		tab.row(s.Key, s.Head, string(s.HeadStatus), yesNo(s.Halted), fmt.Sprint(s.Waiting))
	}
	return tab.flush()
}

func describeSequence(w io.Writer, s norn.SequenceInfo) error {
	tab := newTable(w)
	kv := func(k, v string) { tab.row(k+":", v) }
	kv("queue", s.Queue)
	kv("key", s.Key)
	if s.Head == "" {
		kv("head", "none (the next task submitted with the key runs at once)")
	} else {
		kv("head", fmt.Sprintf("%s (%s)", s.Head, s.HeadStatus))
	}
	kv("halted", yesNo(s.Halted))
	kv("waiting", fmt.Sprint(s.Waiting))
	if s.Halted {
		kv("to go on", fmt.Sprintf("norn retry %s (run it again), or norn delete %s (skip it)", shellWord(s.Head), shellWord(s.Head)))
	}
	return tab.flush()
}

// shellWord quotes s for a POSIX shell when it holds anything but the
// characters ids and keys usually have, so a printed command can be pasted.
func shellWord(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@+=,", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
