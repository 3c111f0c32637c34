package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
	"github.com/spf13/cobra"
)

func init() {
	register(func(g *Globals) *cobra.Command {
		var lf batchListFlags
		cmd := &cobra.Command{
			Use:   "batch",
			Short: "Batches: a callback task once a group of tasks has ended",
			Long: `A batch groups tasks so that something happens once all of them have ended.
Create it with the callbacks it submits: on_complete once every member ended
(whatever the outcome), on_success once every member completed. Tasks join at
submit (norn submit --in-batch ID) until the batch is sealed; once sealed and
every member ended, the batch is done and each callback is submitted once,
with the id norn:batch:ID:complete or norn:batch:ID:success and labels
norn.batch, norn.callback, norn.total and the members' counts.

Without a subcommand, lists batches.`,
			Example: `  norn batch create --id import-42 --on-complete-queue reports --on-complete-spec '{"import":42}'
  norn submit thumbnails '{"image":7}' --in-batch import-42
  norn batch seal import-42
  norn batch get import-42
  norn list --batch import-42 -s failed`,
			Args: cobra.NoArgs,
			RunE: clientRun(g, func(cmd *cobra.Command, _ []string, format string, c *client.Client) error {
				return listBatches(cmd, format, c, &lf)
			}),
		}
		lf.add(cmd)
		cmd.AddCommand(
			clientCommand(batchCreateCmd(g)),
			clientCommand(showCommand(g, "get ID", "Show a batch: state, members' counts and callbacks", (*client.Client).GetBatch, describeBatch)),
			clientCommand(batchListCmd(g)),
			clientCommand(batchSealCmd(g)),
			clientCommand(batchDeleteCmd(g)),
		)
		return clientCommand(cmd)
	})
}

// batchCreateFlags are the flags of `norn batch create`.
type batchCreateFlags struct {
	id                   string
	labels               []string
	successQ, successSp  string
	completeQ, completeS string
	seal                 bool
	file                 string
}

func batchCreateCmd(g *Globals) *cobra.Command {
	var bf batchCreateFlags
	cmd := &cobra.Command{
		Use:   "create [--id ID] [--on-complete-queue Q [--on-complete-spec JSON]] [--on-success-queue Q [--on-success-spec JSON]] [flags]",
		Short: "Create a batch (from flags, or the API's JSON form with --file)",
		Long: `Create a batch. Its callbacks are given by queue and spec here; for every
other setting of a callback (priority, labels, retry...), or to create the
batch with its first members, give the API's JSON form of POST /v1/batches
with --file (- for stdin):

  {"id":"import-42","labels":{"team":"data"},
   "on_complete":{"queue":"reports","spec":{"import":42},"priority":5},
   "tasks":[{"queue":"thumbnails","spec":{"image":1}}],"seal":true}

--seal creates the batch sealed: with --file, its tasks are its only members;
with flags alone it has none and becomes done shortly after, firing its
callbacks.`,
		Example: `  norn batch create --id import-42 --on-complete-queue reports --on-complete-spec '{"import":42}'
  norn batch create --label team=data --on-success-queue notify --on-success-spec '"all good"'
  norn batch create -f batch.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format, err := outputFormat(g)
			if err != nil {
				return err
			}
			nb, err := bf.newBatch(cmd)
			if err != nil {
				return err
			}
			return withClient(g, func(c *client.Client) error {
				out, err := c.CreateBatch(cmd.Context(), nb)
				if err != nil {
					return err
				}
				w := cmd.OutOrStdout()
				if format != outTable {
					return emit(w, format, out)
				}
				line := fmt.Sprintf("batch %s created (%s)", out.Batch.ID, out.Batch.State)
				if len(out.Tasks) > 0 {
					dups := 0
					for _, s := range out.Tasks {
						if s.Duplicate {
							dups++
						}
					}
					line += fmt.Sprintf(" with %s (%d duplicates)", nTasks(int64(len(out.Tasks))), dups)
				}
				fmt.Fprintln(w, line)
				return nil
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&bf.id, "id", "", "batch id (default a UUIDv7)")
	fs.StringArrayVarP(&bf.labels, "label", "l", nil, "label key=value of the batch (repeatable)")
	fs.StringVar(&bf.completeQ, "on-complete-queue", "", "queue of the task submitted once every member ended")
	fs.StringVar(&bf.completeS, "on-complete-spec", "", "JSON spec of that task")
	fs.StringVar(&bf.successQ, "on-success-queue", "", "queue of the task submitted once every member completed")
	fs.StringVar(&bf.successSp, "on-success-spec", "", "JSON spec of that task")
	fs.BoolVar(&bf.seal, "seal", false, "create the batch sealed (no task may join later)")
	fs.StringVarP(&bf.file, "file", "f", "", "read the batch as JSON (POST /v1/batches) from this file (- for stdin)")
	return cmd
}

// newBatch builds the NewBatch of the flags, or reads it from --file; bad
// input is a usage error naming the flag (or the field of the file).
func (bf *batchCreateFlags) newBatch(cmd *cobra.Command) (norn.NewBatch, error) {
	var nb norn.NewBatch
	if bf.file != "" {
		for _, f := range []string{"id", "label", "on-complete-queue", "on-complete-spec", "on-success-queue", "on-success-spec", "seal"} {
			if cmd.Flags().Changed(f) {
				return nb, usagef("give the batch with --file or with flags, not both (--%s)", f)
			}
		}
		var raw []byte
		var err error
		if bf.file == "-" {
			raw, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), maxBatchLine+1))
		} else {
			raw, err = os.ReadFile(bf.file)
		}
		if err != nil {
			return nb, fmt.Errorf("--file: %w", err)
		}
		return parseBatchFile(raw)
	}
	nb.ID, nb.Seal = bf.id, bf.seal
	if len(bf.labels) > 0 {
		l, err := parseLabels(bf.labels)
		if err != nil {
			return nb, usagef("--label: %v", err)
		}
		nb.Labels = l
	}
	var err error
	if nb.OnComplete, err = callbackFlags("on-complete", bf.completeQ, bf.completeS); err != nil {
		return nb, err
	}
	if nb.OnSuccess, err = callbackFlags("on-success", bf.successQ, bf.successSp); err != nil {
		return nb, err
	}
	if err := nb.Validate(); err != nil {
		return nb, usagef("%v", batchFlagNamed(err))
	}
	return nb, nil
}

// parseBatchFile decodes the JSON NewBatch of --file. Unknown fields are
// refused (a typo must not silently drop a callback) and the batch is
// validated, so bad input is a usage error before anything is sent.
func parseBatchFile(raw []byte) (norn.NewBatch, error) {
	var nb norn.NewBatch
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&nb); err != nil {
		return nb, usagef("--file: not a batch object: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nb, usagef("--file: trailing data after the batch object")
	}
	if err := nb.Validate(); err != nil {
		return nb, usagef("--file: %v", err)
	}
	return nb, nil
}

// callbackFlags is the callback of --KIND-queue and --KIND-spec, nil when
// neither is given.
func callbackFlags(kind, queue, spec string) (*norn.NewTask, error) {
	if queue == "" {
		if spec != "" {
			return nil, usagef("--%s-spec needs --%s-queue", kind, kind)
		}
		return nil, nil
	}
	nt := &norn.NewTask{Queue: queue}
	if spec = strings.TrimSpace(spec); spec != "" {
		if !json.Valid([]byte(spec)) {
			return nil, usagef("--%s-spec is not valid JSON (a text spec needs quotes: '\"hello\"')", kind)
		}
		nt.Spec = json.RawMessage(spec)
	}
	return nt, nil
}

// batchFlagNamed rewrites a NewBatch validation error's field as the flag
// that sets it: "on_complete.spec" is --on-complete-spec; the rest of a
// callback (its queue and what the server derives from it) --on-complete-queue.
func batchFlagNamed(err error) error {
	var e *norn.Error
	if !errors.As(err, &e) || e.Field == "" {
		return err
	}
	flag := e.Field
	switch kind, rest, ok := strings.Cut(e.Field, "."); {
	case e.Field == "labels":
		flag = "label"
	case ok && (kind == "on_complete" || kind == "on_success"):
		flag = strings.ReplaceAll(kind, "_", "-") + "-queue"
		if rest == "spec" {
			flag = strings.ReplaceAll(kind, "_", "-") + "-spec"
		}
	}
	return fmt.Errorf("--%s: %s", flag, e.Message)
}

// batchListFlags are the flags of `norn batch list`.
type batchListFlags struct {
	state  string
	labels []string
	limit  int
}

func (lf *batchListFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVarP(&lf.state, "state", "s", "", "only batches in this state: open, sealed or done")
	fs.StringArrayVarP(&lf.labels, "label", "l", nil, "only batches with label key=value (repeatable; all must match)")
	fs.IntVarP(&lf.limit, "limit", "n", 100, "at most this many batches (0 = all)")
}

func batchListCmd(g *Globals) *cobra.Command {
	var lf batchListFlags
	cmd := &cobra.Command{
		Use:   "list [--state S] [--label k=v]",
		Short: "List batches in id order with their members' counts",
		Example: `  norn batch list --state sealed
  norn batch list --label team=data -o json`,
		Args: cobra.NoArgs,
		RunE: clientRun(g, func(cmd *cobra.Command, _ []string, format string, c *client.Client) error {
			return listBatches(cmd, format, c, &lf)
		}),
	}
	lf.add(cmd)
	return cmd
}

// batchPage is the page size of batch list: the API's maximum, so a long
// listing takes few requests.
const batchPage = norn.MaxListLimit

func listBatches(cmd *cobra.Command, format string, c *client.Client, lf *batchListFlags) error {
	if lf.limit < 0 {
		return usagef("--limit must not be negative")
	}
	q := norn.BatchQuery{State: norn.BatchState(strings.ToLower(lf.state))}
	if q.State != "" && !q.State.Valid() {
		return usagef("--state: %q is not a batch state (open, sealed or done)", lf.state)
	}
	if len(lf.labels) > 0 {
		l, err := parseLabels(lf.labels)
		if err != nil {
			return usagef("--label: %v", err)
		}
		q.Labels = l
	}
	// One more than --limit tells the table whether there is more.
	var all []*norn.Batch
	more := false
	for {
		q.Limit = batchPage
		if lf.limit > 0 {
			q.Limit = min(batchPage, lf.limit+1-len(all))
		}
		page, err := c.ListBatches(cmd.Context(), q)
		if err != nil {
			return err
		}
		all = append(all, page...)
		if lf.limit > 0 && len(all) > lf.limit {
			all, more = all[:lf.limit], true
			break
		}
		if len(page) < q.Limit {
			break
		}
		q.After = page[len(page)-1].ID
	}
	w := cmd.OutOrStdout()
	if format != outTable {
		if all == nil {
			all = []*norn.Batch{}
		}
		return emitAll(w, format, all)
	}
	now := time.Now()
	tab := newTable(w, "BATCH", "STATE", "ENDED", "COMPLETED", "ABORTED", "CANCELLED", "CALLBACKS", "CREATED", "LABELS")
	for _, b := range all {
		tab.row(b.ID, string(b.State), fmt.Sprintf("%d/%d", batchEnded(b), b.Total),
			fmt.Sprint(b.Counts[norn.StatusCompleted]), fmt.Sprint(b.Counts[norn.StatusAborted]), fmt.Sprint(b.Counts[norn.StatusCancelled]),
			batchCallbacks(b), ago(b.Created, now), formatLabels(b.Labels))
	}
	if err := tab.flush(); err != nil {
		return err
	}
	switch {
	case more:
		fmt.Fprintf(cmd.ErrOrStderr(), "(first %d batches shown; use --limit 0 for all)\n", lf.limit)
	case len(all) == 0:
		fmt.Fprintln(cmd.ErrOrStderr(), "(no batches)")
	}
	return nil
}

// batchEnded is how many of b's members have ended (completed, aborted or
// cancelled).
func batchEnded(b *norn.Batch) int {
	n := 0
	for st, c := range b.Counts {
		if st.Terminal() {
			n += c
		}
	}
	return n
}

// batchCallbacks says which callbacks b has and which were submitted:
// "complete, success*" (* = submitted).
func batchCallbacks(b *norn.Batch) string {
	var out []string
	for _, c := range []struct {
		name string
		t    *norn.NewTask
		id   string
	}{{norn.CallbackComplete, b.OnComplete, b.CompleteTask}, {norn.CallbackSuccess, b.OnSuccess, b.SuccessTask}} {
		switch {
		case c.t == nil:
		case c.id != "":
			out = append(out, c.name+" (submitted)")
		default:
			out = append(out, c.name)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ", ")
}

// describeBatch prints a batch as aligned "key: value" lines for people.
func describeBatch(w io.Writer, b *norn.Batch) error {
	now := time.Now()
	tab := newTable(w)
	kv := func(k, v string) { tab.row(k+":", v) }
	kv("id", b.ID)
	kv("state", string(b.State))
	kv("labels", formatLabels(b.Labels))
	kv("created", stamp(b.Created, now))
	kv("sealed", stamp(b.Sealed, now))
	kv("done", stamp(b.Done, now))
	ended := batchEnded(b)
	pct := 0
	if b.Total > 0 {
		pct = ended * 100 / b.Total
	}
	kv("members", fmt.Sprintf("%d, %d ended (%d%%)", b.Total, ended, pct))
	kv("counts", batchCounts(b.Counts))
	if b.Final != nil {
		kv("final", batchCounts(b.Final))
	}
	for _, c := range []struct {
		name string
		t    *norn.NewTask
		id   string
	}{{"on_complete", b.OnComplete, b.CompleteTask}, {"on_success", b.OnSuccess, b.SuccessTask}} {
		if c.t == nil {
			kv(c.name, "-")
			continue
		}
		v := "queue " + c.t.Queue + ", spec " + compactJSON(c.t.Spec)
		if c.id != "" {
			v += "; submitted as " + c.id
		} else {
			v += "; not submitted"
		}
		kv(c.name, v)
	}
	return tab.flush()
}

// batchCounts renders a batch's counts in lifecycle order, the statuses
// with members only ("ready 3, completed 5"), or "-".
func batchCounts(c map[norn.Status]int) string {
	var parts []string
	for _, s := range norn.AllStatuses {
		if n := c[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func batchSealCmd(g *Globals) *cobra.Command {
	return showCommand(g, "seal ID", "Seal a batch: no more members may join; it is done once they have all ended",
		(*client.Client).SealBatch,
		func(w io.Writer, b *norn.Batch) error {
			line := fmt.Sprintf("batch %s sealed", b.ID)
			switch b.State {
			case norn.BatchDone:
				line += " and done (every member had ended)"
			case norn.BatchSealed:
				line += fmt.Sprintf(" (%d of %d members ended)", batchEnded(b), b.Total)
			}
			_, err := fmt.Fprintln(w, line)
			return err
		})
}

// batchDeleteOutput is the JSON form of `norn batch delete`.
type batchDeleteOutput struct {
	Batch string `json:"batch"`
	// Deleted is how many members were deleted (with --members).
	Deleted int64 `json:"deleted"`
	// DryRun is set when nothing was deleted and Deleted is how many
	// members would have been.
	DryRun bool `json:"dry_run,omitempty"`
}

func batchDeleteCmd(g *Globals) *cobra.Command {
	var members, dryRun, yes bool
	cmd := &cobra.Command{
		Use:   "delete ID [--members [--yes]]",
		Short: "Delete a batch, and with --members its member tasks",
		Long: `Delete a batch. Its members stay (they keep naming the batch in their batch
field, so no new batch can take its id while they exist) unless --members is
given: then they are deleted too, whatever their status. With --members the
command asks on a terminal with the number of members first; --yes skips the
question, and is required where there is no terminal (scripts); --dry-run
only counts them. Callbacks already submitted are ordinary tasks and stay.`,
		Example: `  norn batch delete import-42
  norn batch delete import-42 --members --dry-run
  norn batch delete import-42 --members --yes`,
		Args: cobra.ExactArgs(1),
		RunE: clientRun(g, func(cmd *cobra.Command, args []string, format string, c *client.Client) error {
			id := args[0]
			if (dryRun || yes) && !members {
				return usagef("--dry-run and --yes go with --members")
			}
			if err := norn.ValidateBatchID("id", id); err != nil {
				return usagef("%v", messageOf(err))
			}
			if !members {
				if _, err := c.DeleteBatch(cmd.Context(), id, false); err != nil {
					return err
				}
				if format != outTable {
					return emit(cmd.OutOrStdout(), format, batchDeleteOutput{Batch: id})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "batch %s deleted (its members stay)\n", id)
				return nil
			}
			// A missing batch is not_found before anything is counted or asked.
			if _, err := c.GetBatch(cmd.Context(), id); err != nil {
				return err
			}
			var n int64
			if dryRun || !yes {
				var err error
				if n, err = c.Count(cmd.Context(), norn.Filter{Batch: id}); err != nil {
					return err
				}
			}
			if !dryRun {
				if err := confirmBulk(cmd.InOrStdin(), cmd.ErrOrStderr(), "delete", n, yes); err != nil {
					return err
				}
				d, err := c.DeleteBatch(cmd.Context(), id, true)
				if err != nil {
					return err
				}
				n = int64(d)
			}
			w := cmd.OutOrStdout()
			switch {
			case format != outTable:
				return emit(w, format, batchDeleteOutput{Batch: id, Deleted: n, DryRun: dryRun})
			case dryRun:
				fmt.Fprintf(w, "would delete batch %s and %s\n", id, nTasks(n))
			default:
				fmt.Fprintf(w, "batch %s deleted with %s\n", id, nTasks(n))
			}
			return nil
		}),
	}
	fs := cmd.Flags()
	fs.BoolVar(&members, "members", false, "also delete the batch's member tasks")
	fs.BoolVar(&dryRun, "dry-run", false, "with --members: only count the members")
	fs.BoolVarP(&yes, "yes", "y", false, "with --members: delete without asking (required without a terminal)")
	return cmd
}
