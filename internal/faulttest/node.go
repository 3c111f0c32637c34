package faulttest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nornq/norn/client"
	"github.com/nornq/norn/internal/nornbin"
)

// logLine is one JSON log record of a node, with the time it was read.
type logLine struct {
	Node string
	At   time.Time // when the test read it
	Rec  map[string]any
	Raw  string
}

// Node is one `norn server` process that the test can kill, restart,
// stop and continue. It keeps its address across restarts, so clients
// and workers never need to learn a new one.
type Node struct {
	t    testing.TB
	Name string
	args []string
	addr string
	URL  string
	C    *client.Client

	mu    sync.Mutex
	cmd   *exec.Cmd
	done  chan struct{}
	out   strings.Builder
	lines []logLine
	runs  int
	kills []time.Time
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// StartNode starts `norn server` with args (plus --addr and JSON debug
// logs) and waits until it answers /readyz.
func StartNode(t testing.TB, name string, args ...string) *Node {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{t: t, Name: name, args: args, addr: addr, URL: "http://" + addr}
	// Client-side timeouts are the workers' business (contexts); a stopped
	// node must not hold connections forever, though.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, ResponseHeaderTimeout: 0}}
	if n.C, err = client.New(n.URL, client.WithHTTPClient(hc)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Kill()
		if t.Failed() {
			// The monitor's lines in full (the check reads them), then the tail.
			var mon strings.Builder
			for _, l := range n.Lines() {
				if m, _ := l.Rec["msg"].(string); strings.Contains(m, "monitor") {
					mon.WriteString(l.Raw + "\n")
				}
			}
			t.Logf("%s monitor lines:\n%s", name, mon.String())
			out := n.Output()
			if len(out) > 20000 {
				out = "…" + out[len(out)-20000:]
			}
			t.Logf("%s output:\n%s", name, out)
		}
	})
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	return n
}

// Start starts the process (again) and waits until it is ready.
func (n *Node) Start() error {
	bin := nornbin.Path(n.t)
	args := append([]string{"server", "--addr", n.addr, "--log-format", "json", "--log-level", "debug"}, n.args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %v", n.Name, err)
	}
	done := make(chan struct{})
	n.mu.Lock()
	n.cmd, n.done = cmd, done
	n.runs++
	run := n.runs
	n.mu.Unlock()
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			ll := logLine{Node: n.Name, At: time.Now(), Raw: line}
			if strings.HasPrefix(line, "{") {
				_ = json.Unmarshal([]byte(line), &ll.Rec)
			}
			n.mu.Lock()
			fmt.Fprintf(&n.out, "[run %d] %s\n", run, line)
			n.lines = append(n.lines, ll)
			n.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(done)
	}()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get(n.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited during start-up:\n%s", n.Name, n.Output())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within 90s:\n%s", n.Name, n.Output())
		}
	}
}

func (n *Node) signal(sig syscall.Signal) {
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL and waits for the process to exit.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	n.mu.Lock()
	n.kills = append(n.kills, time.Now())
	n.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
}

// Kills returns when the test killed the node.
func (n *Node) Kills() []time.Time {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]time.Time(nil), n.kills...)
}

// Stop freezes the process (SIGSTOP): its sockets stay open, it answers nothing.
func (n *Node) Stop() { n.signal(syscall.SIGSTOP) }

// Cont resumes a stopped process.
func (n *Node) Cont() { n.signal(syscall.SIGCONT) }

// Alive reports whether the current process is running.
func (n *Node) Alive() bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Runs is how many times the process was started.
func (n *Node) Runs() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.runs
}

// Output is everything the node printed, over all its runs.
func (n *Node) Output() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.out.String()
}

// Lines returns the node's log records so far.
func (n *Node) Lines() []logLine {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]logLine(nil), n.lines...)
}

// cleanEnv is the environment without the developer's NORN_* settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NORN_") {
			env = append(env, kv)
		}
	}
	return env
}
