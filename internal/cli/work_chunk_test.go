package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/internal/await"
	"github.com/nornq/norn/internal/servertest"
	"github.com/nornq/norn/server"
	"github.com/nornq/norn/store/embedded"
)

// emptyClaims counts the claims answered empty that were sent after a mark.
type emptyClaims struct {
	norn.Store
	mu    sync.Mutex
	mark  time.Time
	empty int
}

func (s *emptyClaims) Claim(ctx context.Context, req norn.ClaimRequest) ([]*norn.Task, error) {
	sent := time.Now()
	tasks, err := s.Store.Claim(ctx, req)
	s.mu.Lock()
	if err == nil && len(tasks) == 0 && !s.mark.IsZero() && sent.After(s.mark) {
		s.empty++
	}
	s.mu.Unlock()
	return tasks, err
}

// norn work --min runs the command once per chunk: three tasks ready, one
// process, each task with the outcome of its line.
func TestWorkMinRunsCommandPerChunk(t *testing.T) {
	t.Parallel()
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	spy := &emptyClaims{Store: st}
	srv := servertest.Start(t, server.Config{Store: spy})
	runs := filepath.Join(t.TempDir(), "runs")
	script := `cat >> "` + runs + `"; echo "chunk of $NORN_CHUNK" >> "` + runs + `"
echo '{"id":"r1","result":"one"}'
echo '{"id":"r2","error":"bad row","abort":true}'`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := NewRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs([]string{"--server", srv.URL(), "work", "-q", "rows", "-c", "5", "--min", "3", "--wait", "200ms", "--", "sh", "-c", script})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	_, err = st.Submit(context.Background(), norn.NewTask{ID: "r1", Queue: "rows"}, norn.NewTask{ID: "r2", Queue: "rows"})
	if err != nil {
		t.Fatal(err)
	}
	// Two of three: a claim comes back empty and no chunk runs. Three: one
	// chunk of three.
	spy.mu.Lock()
	spy.mark = time.Now()
	spy.mu.Unlock()
	await.Until(t, 10*time.Second, "an empty claim with two of three ready", func() bool {
		spy.mu.Lock()
		defer spy.mu.Unlock()
		return spy.empty > 0
	})
	if b, _ := os.ReadFile(runs); len(b) != 0 {
		t.Fatalf("the command ran with two of --min 3 ready:\n%s", b)
	}
	if _, err := st.Submit(context.Background(), norn.NewTask{ID: "r3", Queue: "rows"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]norn.Status{"r1": norn.StatusCompleted, "r2": norn.StatusAborted, "r3": norn.StatusCompleted}
	await.Until(t, 10*time.Second, "r1 completed, r2 aborted, r3 completed", func() bool {
		for id, s := range want {
			tk, err := st.Get(context.Background(), id)
			if err != nil || tk.Status != s {
				return false
			}
		}
		return true
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("norn work: %v\nstderr: %s", err, errb.String())
	}
	b, _ := os.ReadFile(runs)
	if strings.Count(string(b), "chunk of") != 1 || !strings.Contains(string(b), "chunk of 3") {
		t.Errorf("command runs:\n%s\nwant one chunk of 3", b)
	}
	if tk, _ := st.Get(context.Background(), "r1"); string(tk.Result) != `"one"` {
		t.Errorf("r1 result %s", tk.Result)
	}
}

func TestWorkMinFlagsChecked(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--min", "5", "-c", "4"}, "--min 5 is more than -c 4"},
		{[]string{"--min", "-1"}, "--min must not be negative"},
		{[]string{"--linger", "1s", "-c", "4"}, "--linger needs --min 2"},
		{[]string{"--min", "1", "--linger", "1s", "-c", "4"}, "--linger needs --min 2"},
		{[]string{"--min", "2", "-c", "4", "--linger=-1s"}, "--linger must not be negative"},
		{[]string{"--min", "2", "-c", "4", "--batch", "3"}, "--batch does not apply with --min"},
		{[]string{"--group-by", "concurrency_key", "-c", "4"}, "--group-by needs --min"},
		{[]string{"--min", "2", "-c", "4", "--group-by", "tenant"}, "--group-by"},
	} {
		args := append(append([]string{"--server", "http://127.0.0.1:1", "work", "-q", "rows"}, c.args...), "true")
		_, _, err := runNorn(t, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// norn work --min --group-by runs one chunk per key: two tasks of x run
// together, y's one task waits for a second.
func TestWorkGroupByRunsOneKeyPerChunk(t *testing.T) {
	t.Parallel()
	st, err := embedded.Open(context.Background(), embedded.Options{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	spy := &emptyClaims{Store: st}
	srv := servertest.Start(t, server.Config{Store: spy})
	runs := filepath.Join(t.TempDir(), "runs")
	script := `cat >> "` + runs + `"; echo "chunk of $NORN_CHUNK" >> "` + runs + `"`
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root := NewRoot()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs([]string{"--server", srv.URL(), "work", "-q", "rows", "-c", "5", "--min", "2", "--group-by", "concurrency_key",
		"--wait", "200ms", "--", "sh", "-c", script})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	_, err = st.Submit(context.Background(), norn.NewTask{ID: "x1", Queue: "rows", ConcurrencyKey: "x"},
		norn.NewTask{ID: "y1", Queue: "rows", ConcurrencyKey: "y"}, norn.NewTask{ID: "x2", Queue: "rows", ConcurrencyKey: "x"})
	if err != nil {
		t.Fatal(err)
	}
	await.Until(t, 10*time.Second, "x1 and x2 completed", func() bool {
		for _, id := range []string{"x1", "x2"} {
			if tk, err := st.Get(context.Background(), id); err != nil || tk.Status != norn.StatusCompleted {
				return false
			}
		}
		return true
	})
	spy.mu.Lock()
	spy.mark = time.Now()
	spy.mu.Unlock()
	await.Until(t, 10*time.Second, "an empty claim with y's one task ready", func() bool {
		spy.mu.Lock()
		defer spy.mu.Unlock()
		return spy.empty > 0
	})
	if tk, _ := st.Get(context.Background(), "y1"); tk.Status != norn.StatusReady {
		t.Errorf("y1 %s, want ready: its key has one task of --min 2", tk.Status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("norn work: %v\nstderr: %s", err, errb.String())
	}
	b, _ := os.ReadFile(runs)
	if strings.Count(string(b), "chunk of") != 1 || !strings.Contains(string(b), "chunk of 2") || strings.Contains(string(b), "y1") {
		t.Errorf("command runs:\n%s\nwant one chunk of x1 and x2", b)
	}
}
