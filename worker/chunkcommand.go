package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nornq/norn"
)

// MaxChunkOutput bounds what a ChunkCommand's stdout may hold; lines
// beyond it are not read, so their tasks get the exit status's outcome.
const MaxChunkOutput = 64 << 20

// ChunkCommand is a ChunkHandler that runs an external program once per
// chunk — the engine of `norn work --min`. It is configured like Command,
// and runs the same way (own process group, stderr copied and its tail
// kept, progress lines, SIGTERM then SIGKILL after KillGrace), but for
// many tasks at once:
//   - stdin holds one JSON object per line per task, in claim order:
//     {"id", "queue", "lease", "attempt", "spec", "traceparent"} (spec and
//     traceparent left out when the task has none);
//   - NORN_WORKER and NORN_CHUNK (the number of tasks) are in its
//     environment;
//   - each line of stdout that is a JSON object naming a task of the chunk
//     by "id" is that task's outcome: {"id":"…","result":…} completes it
//     (result optional); {"id":"…","error":"why","code":"…"} fails it for
//     retry ("retry_in":"30s" asks for that wait), with "abort":true
//     aborts it for good; {"id":"…","snooze":"30s"} (or an RFC 3339 time;
//     "30s key" also holds back its key) snoozes it. Other lines are ignored; the last line for a task wins;
//   - a task without an outcome line gets the exit status's, as a
//     Command's task does (0 completes it without a result, 75 fails it
//     for retry, another status aborts it, a signal fails it);
//   - a progress line on stderr sets the progress of every task.
//
// The program is stopped when every task of the chunk is cancelled or
// lost, or a shutdown's grace period ends; a single task cancelled
// meanwhile just has its outcome line ignored.
type ChunkCommand Command

// chunkInput is one line of a ChunkCommand's stdin.
type chunkInput struct {
	ID          string          `json:"id"`
	Queue       string          `json:"queue"`
	Lease       uint64          `json:"lease"`
	Attempt     int             `json:"attempt"`
	Spec        json.RawMessage `json:"spec,omitempty"`
	Traceparent string          `json:"traceparent,omitempty"`
}

// chunkOutcome is one line of a ChunkCommand's stdout.
type chunkOutcome struct {
	ID      string          `json:"id"`
	Result  json.RawMessage `json:"result"`
	Error   *string         `json:"error"`
	Code    string          `json:"code"`
	Abort   bool            `json:"abort"`
	RetryIn string          `json:"retry_in"`
	Snooze  string          `json:"snooze"`
}

// ServeChunk runs the program for tasks.
func (c *ChunkCommand) ServeChunk(ctx context.Context, tasks []*Task) []error {
	var stdin bytes.Buffer
	enc := json.NewEncoder(&stdin)
	for _, t := range tasks {
		tp, _ := norn.TraceFromContext(t.Context())
		_ = enc.Encode(chunkInput{ID: t.ID, Queue: t.Queue, Lease: t.Lease, Attempt: t.Attempts, Spec: t.Spec, Traceparent: tp})
	}
	worker := ""
	if len(tasks) > 0 {
		worker = tasks[0].Ref().Worker
	}
	env := []string{"NORN_WORKER=" + worker, "NORN_CHUNK=" + strconv.Itoa(len(tasks))}
	progress := func(p float64) {
		for _, t := range tasks {
			t.SetProgress(p)
		}
	}
	errs := make([]error, len(tasks))
	p, err := (*Command)(c).run(ctx, env, stdin.Bytes(), progress, MaxChunkOutput)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	if p.killed {
		for i := range errs {
			errs[i] = context.Cause(ctx)
		}
		return errs
	}
	index := make(map[string]int, len(tasks))
	for i, t := range tasks {
		index[t.ID] = i
	}
	lines := map[int]chunkOutcome{}
	for _, line := range bytes.Split(p.stdout.buf.Bytes(), []byte("\n")) {
		var o chunkOutcome
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &o) != nil {
			continue
		}
		if i, ok := index[o.ID]; ok {
			lines[i] = o
		}
	}
	for i, t := range tasks {
		if o, ok := lines[i]; ok {
			errs[i] = o.outcome(t)
			continue
		}
		// The exit status decides, as for a Command's task without output.
		errs[i] = outcome(t, p.werr, &capped{}, p.tail)
	}
	return errs
}

// outcome is what the line asks for t.
func (o chunkOutcome) outcome(t *Task) error {
	if o.Snooze != "" {
		sn, _, err := ParseSnooze([]byte(SnoozePrefix + " " + o.Snooze))
		if err != nil {
			return WithCode("invalid_outcome", fmt.Errorf("task %s: %w", t.ID, err))
		}
		return snoozeFor(sn)
	}
	if o.Error != nil || o.Abort {
		msg := "failed"
		if o.Error != nil && *o.Error != "" {
			msg = *o.Error
		}
		err := errors.New(msg)
		if o.RetryIn != "" {
			d, perr := time.ParseDuration(o.RetryIn)
			if perr != nil || d <= 0 {
				return WithCode("invalid_outcome", fmt.Errorf("task %s: retry_in %q is not a positive Go duration", t.ID, truncateUTF8(o.RetryIn, 64)))
			}
			err = RetryIn(d, err)
		}
		if o.Abort {
			err = Abort(err)
		}
		if o.Code != "" {
			err = WithCode(o.Code, err)
		}
		return err
	}
	if len(o.Result) > 0 && !bytes.Equal(o.Result, []byte("null")) {
		if err := t.SetResult(o.Result); err != nil {
			return WithCode("invalid_result", Abort(err))
		}
	}
	return nil
}
