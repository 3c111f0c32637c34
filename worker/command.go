package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nornq/norn"
)

// Exit codes of a Command's process that mean something to Norn.
const (
	// ExitTempFail (EX_TEMPFAIL from sysexits.h) fails the task for retry,
	// or snoozes it when the last line of stdout asks for that (see
	// ParseSnooze).
	ExitTempFail = 75
)

// SnoozePrefix starts the line by which a command asks for a snooze: the
// last line of its stdout, followed by exit status ExitTempFail.
const SnoozePrefix = "norn:snooze"

// DefaultStderrTail is how many bytes of a command's stderr become the
// error description when it fails.
const DefaultStderrTail = 4096

// Command is a Handler that runs an external program once per task — the
// engine of `norn work`. The program gets:
//   - the task's spec on stdin (nothing when the task has no spec);
//   - NORN_TASK_ID, NORN_QUEUE, NORN_LEASE, NORN_ATTEMPT and NORN_WORKER in
//     its environment, on top of the worker's own environment and Env;
//   - TRACEPARENT and TRACESTATE: the W3C trace context of the attempt (its
//     span when the worker traces, else the task's stored one; empty when
//     the task has none), for the program's own spans to be its children.
//
// Its outcome:
//   - exit 0 completes the task; stdout becomes the result: as is when it is
//     JSON, else the text (trailing newlines removed) as a JSON string; empty
//     stdout means no result;
//   - exit 75 (EX_TEMPFAIL) fails the task for retry; but when the last
//     line of stdout is "norn:snooze 30s" (a positive Go duration) or
//     "norn:snooze 2026-01-02T15:04:05Z" (an RFC 3339 time), optionally
//     followed by " key" (also hold back the task's concurrency key, as
//     SnoozeKey), the task is snoozed until then instead: no error
//     recorded, the attempt given back. A malformed snooze line fails the task for retry with code
//     "invalid_snooze" (the line is only read with exit 75);
//   - any other exit code aborts it; death by a signal the worker did not
//     send (e.g. the OOM killer) fails it for retry. Either way the error
//     description is the tail of stderr and the code is "exit_<n>" or
//     "signal".
//
// Lines of the form "progress: 0.4" (or "progress: 40%") on stderr set the
// task's progress, sent with the next heartbeat. The program runs in its own
// process group; when the task is cancelled, its lease is lost, it reaches
// its max_runtime or a shutdown yields it, the whole group is killed.
type Command struct {
	// Path is the program (looked up in PATH when it has no slash).
	Path string
	// Args are the arguments after the program name.
	Args []string
	// Dir is the working directory; default the worker's.
	Dir string
	// Env is added to the worker's environment.
	Env []string
	// Stderr receives a copy of the program's stderr (progress lines
	// included); nil discards it.
	Stderr io.Writer
	// KillGrace: on cancellation the process group first gets SIGTERM and,
	// if still alive after KillGrace, SIGKILL. 0 sends SIGKILL at once.
	KillGrace time.Duration
	// StderrTail is how many bytes of stderr the error description keeps.
	// Default DefaultStderrTail.
	StderrTail int
}

// ServeTask runs the program for t.
func (c *Command) ServeTask(ctx context.Context, t *Task) error {
	traceparent, tracestate := norn.TraceFromContext(ctx)
	env := []string{
		"NORN_TASK_ID=" + t.ID,
		"NORN_QUEUE=" + t.Queue,
		"NORN_LEASE=" + strconv.FormatUint(t.Lease, 10),
		"NORN_ATTEMPT=" + strconv.Itoa(t.Attempts),
		"NORN_WORKER=" + t.Ref().Worker,
		// Set even when empty: a TRACEPARENT the worker inherited is not
		// the task's parent.
		"TRACEPARENT=" + traceparent,
		"TRACESTATE=" + tracestate,
	}
	p, err := c.run(ctx, env, t.Spec, t.SetProgress, norn.MaxResultBytes)
	if err != nil {
		return err
	}
	if p.killed {
		return context.Cause(ctx)
	}
	return outcome(t, p.werr, p.stdout, p.tail)
}

// ran is how a program run ended.
type ran struct {
	werr   error
	killed bool // ctx ended first and the program was stopped
	stdout *capped
	tail   *tailBuffer
}

// run runs the program with env added to the worker's environment and
// Env, stdin as its input and progress told of its progress lines, until
// it exits or ctx ends (then its process group is stopped). An error means
// it could not start.
func (c *Command) run(ctx context.Context, env []string, stdin []byte, progress func(float64), stdoutMax int) (*ran, error) {
	path := c.Path
	if !strings.Contains(path, "/") {
		p, err := exec.LookPath(path)
		if err != nil {
			return nil, WithCode("exec_failed", Abort(err))
		}
		path = p
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		return nil, err
	}
	cmd := exec.Command(path, c.Args...)
	cmd.Dir = c.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	cmd.Env = append(append(os.Environ(), c.Env...), env...)
	setProcessGroup(cmd)
	err = cmd.Start()
	// The child has its own copies; ours must close so EOFs arrive.
	closeAll(inR, outW, errW)
	if err != nil {
		closeAll(inW, outR, errR)
		return nil, WithCode("exec_failed", Abort(err))
	}

	var wg sync.WaitGroup
	wg.Add(3)
	go func() {
		defer wg.Done()
		// A program that does not read its stdin gets EPIPE here; that is
		// its business.
		_, _ = inW.Write(stdin)
		_ = inW.Close()
	}()
	stdout := &capped{max: stdoutMax}
	go func() {
		defer wg.Done()
		_, _ = io.Copy(stdout, outR)
	}()
	tailMax := c.StderrTail
	if tailMax <= 0 {
		tailMax = DefaultStderrTail
	}
	tail := &tailBuffer{max: tailMax}
	go func() {
		defer wg.Done()
		scanStderr(errR, c.Stderr, tail, progress)
	}()

	werr, killed := c.wait(ctx, cmd)
	// Leftover children of the program would keep our pipes open.
	signalGroup(cmd, sigKill)
	_ = inW.Close()
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
		// Something outside the group holds the pipes; stop reading.
		closeAll(outR, errR)
		<-drained
	}
	closeAll(outR, errR)
	return &ran{werr: werr, killed: killed, stdout: stdout, tail: tail}, nil
}

// ParseResult turns a command's stdout into a task result: JSON as is
// (surrounding whitespace removed), other text as a JSON string without its
// trailing newlines, nothing for empty or all-whitespace output.
func ParseResult(out []byte) json.RawMessage {
	trimmed := bytes.TrimSpace(out)
	if len(trimmed) == 0 {
		return nil
	}
	if json.Valid(trimmed) {
		return json.RawMessage(append([]byte(nil), trimmed...))
	}
	text := strings.TrimRight(string(out), "\r\n")
	raw, _ := json.Marshal(text) // strings always encode
	return raw
}

// ParseSnooze reads the snooze request of a command's stdout: its last
// non-empty line, "norn:snooze 30s" (a positive Go duration) or "norn:snooze
// 2026-01-02T15:04:05Z" (an RFC 3339 time; a past one makes the task ready
// at once), optionally followed by "key" to hold back the task's
// concurrency key too (scope "key", see SnoozeKey). ok says whether that
// line is a snooze request at all; err, when it is one, says what is wrong
// with its value.
func ParseSnooze(out []byte) (sn norn.Snooze, ok bool, err error) {
	out = bytes.TrimRight(out, " \t\r\n")
	line := out[bytes.LastIndexByte(out, '\n')+1:]
	rest, found := bytes.CutPrefix(bytes.TrimSpace(line), []byte(SnoozePrefix))
	if !found || (len(rest) > 0 && rest[0] != ' ' && rest[0] != '\t') {
		return norn.Snooze{}, false, nil
	}
	fields := strings.Fields(string(rest))
	if len(fields) == 0 {
		return norn.Snooze{}, true, errors.New(`snooze line without a delay or time: want "norn:snooze 30s" or "norn:snooze 2026-01-02T15:04:05Z"`)
	}
	v := fields[0]
	switch {
	case len(fields) == 2 && fields[1] == norn.SnoozeScopeKey:
		sn.Scope = norn.SnoozeScopeKey
	case len(fields) > 1:
		return norn.Snooze{}, true, fmt.Errorf(`snooze line %q: after the delay or time only "key" may follow`, truncateUTF8(strings.Join(fields, " "), 64))
	}
	if d, derr := time.ParseDuration(v); derr == nil {
		if d <= 0 {
			return norn.Snooze{}, true, fmt.Errorf("snooze delay %q is not positive", v)
		}
		sn.Delay = norn.Duration(d)
		return sn, true, nil
	}
	at, terr := time.Parse(time.RFC3339Nano, v)
	if terr != nil || at.IsZero() {
		return norn.Snooze{}, true, fmt.Errorf("snooze value %q is neither a Go duration nor an RFC 3339 time", truncateUTF8(v, 64))
	}
	sn.RunAt = at.UTC()
	return sn, true, nil
}

// snoozeFor is the handler error asking for sn, a snooze ParseSnooze
// read.
func snoozeFor(sn norn.Snooze) error {
	return &snoozeError{d: sn.Delay.D(), at: sn.RunAt, key: sn.Scope == norn.SnoozeScopeKey}
}

// ParseProgress recognises a progress line: "progress: 0.4" or
// "progress: 40%" (case-insensitive, surrounding spaces allowed), with a
// value within 0..1 (0..100%).
func ParseProgress(line string) (float64, bool) {
	line = strings.TrimSpace(line)
	const prefix = "progress:"
	if len(line) <= len(prefix) || !strings.EqualFold(line[:len(prefix)], prefix) {
		return 0, false
	}
	v := strings.TrimSpace(line[len(prefix):])
	scale := 1.0
	if strings.HasSuffix(v, "%") {
		v, scale = strings.TrimSpace(strings.TrimSuffix(v, "%")), 100
	}
	p, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, false
	}
	p /= scale
	if !(p >= 0 && p <= 1) { // also rejects NaN
		return 0, false
	}
	return p, true
}

// scanStderr copies r to copyTo and tail, and reports progress lines.
// Overlong lines are passed through but never parsed.
func scanStderr(r io.Reader, copyTo io.Writer, tail *tailBuffer, progress func(float64)) {
	br := bufio.NewReaderSize(r, 4096)
	midLine := false
	for {
		chunk, err := br.ReadSlice('\n')
		if len(chunk) > 0 {
			if copyTo != nil {
				_, _ = copyTo.Write(chunk)
			}
			tail.Write(chunk)
			if !midLine && err != bufio.ErrBufferFull {
				if p, ok := ParseProgress(string(chunk)); ok {
					progress(p)
				}
			}
		}
		midLine = err == bufio.ErrBufferFull
		if err != nil && err != bufio.ErrBufferFull {
			return
		}
	}
}

// capped keeps the first max bytes written and notes whether more came.
type capped struct {
	buf  bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - c.buf.Len()
	if len(p) > room {
		c.over = true
		c.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	c.buf.Write(p)
	return len(p), nil
}

// tailBuffer keeps the last max bytes written.
type tailBuffer struct {
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0:0], t.buf[len(t.buf)-t.max:]...)
	}
}

// String returns the kept tail as valid UTF-8 without surrounding space.
func (t *tailBuffer) String() string {
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(b), ""))
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// wait waits for the program to exit; when ctx ends first it stops the
// program's process group (SIGTERM, then SIGKILL after KillGrace) and
// reports it killed.
func (c *Command) wait(ctx context.Context, cmd *exec.Cmd) (werr error, killed bool) {
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case werr = <-waited:
	case <-ctx.Done():
		killed = true
		if c.KillGrace > 0 {
			signalGroup(cmd, sigTerm)
			timer := time.NewTimer(c.KillGrace)
			select {
			case werr = <-waited:
			case <-timer.C:
				signalGroup(cmd, sigKill)
				werr = <-waited
			}
			timer.Stop()
		} else {
			signalGroup(cmd, sigKill)
			werr = <-waited
		}
	}
	return werr, killed
}

// outcome turns how the program ended into the task's: its stdout the
// result on exit 0, a snooze or a retried failure on exit 75, an abort
// on any other exit.
func outcome(t *Task, werr error, stdout *capped, tail *tailBuffer) error {
	if werr == nil {
		if stdout.over {
			return WithCode("result_too_large", Abort(fmt.Errorf("stdout is larger than %d bytes", norn.MaxResultBytes)))
		}
		if res := ParseResult(stdout.buf.Bytes()); res != nil {
			if err := t.SetResult(res); err != nil {
				return WithCode("invalid_result", Abort(err))
			}
		}
		return nil
	}
	desc := tail.String()
	var ee *exec.ExitError
	if !errors.As(werr, &ee) {
		return WithCode("exec_failed", fmt.Errorf("%w\n%s", werr, desc))
	}
	code := ee.ExitCode()
	switch {
	case code == ExitTempFail:
		if stdout.over {
			return WithCode("exit_75", fmt.Errorf("exit status 75 (temporary failure)\n%s", desc))
		}
		switch sn, ok, err := ParseSnooze(stdout.buf.Bytes()); {
		case ok && err != nil:
			return WithCode("invalid_snooze", fmt.Errorf("exit status 75 with %w\n%s", err, desc))
		case ok:
			return snoozeFor(sn)
		}
		return WithCode("exit_75", fmt.Errorf("exit status 75 (temporary failure)\n%s", desc))
	case code < 0:
		return WithCode("signal", fmt.Errorf("%s\n%s", ee.ProcessState.String(), desc))
	default:
		return WithCode("exit_"+strconv.Itoa(code), Abort(fmt.Errorf("exit status %d\n%s", code, desc)))
	}
}
