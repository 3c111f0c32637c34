package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestProgressRendersAndThrottles(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newProgress(&buf, "submitting", "tasks", 1000, true)
	p.Now = func() time.Time { return now }
	p.start = now
	now = now.Add(2 * time.Second)
	p.Set(500, 2000)
	if got := buf.String(); !strings.Contains(got, "submitting [===============>") || !strings.Contains(got, " 50% 2000 tasks 1000/s ETA 2s") {
		t.Fatalf("render %q", got)
	}
	buf.Reset()
	p.Set(600, 2100) // same instant: throttled
	if buf.Len() != 0 {
		t.Fatalf("redrew within RedrawEvery: %q", buf.String())
	}
	now = now.Add(time.Second)
	p.Finish()
	if got := buf.String(); !strings.Contains(got, "100%") || !strings.HasSuffix(got, "\n") {
		t.Fatalf("finish %q", got)
	}
	buf.Reset()
	p.Set(700, 1)
	if buf.Len() != 0 {
		t.Fatal("drew after Finish")
	}
}

func TestProgressSilentWhenNotATerminal(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := NewProgress(&buf, "x", "tasks", 0)
	p.Set(1, 1)
	p.Finish()
	p.Clear()
	if buf.Len() != 0 {
		t.Fatalf("wrote %q to a non-terminal", buf.String())
	}
}

// TestProgressFirstFrameHasNoRate: a frame drawn microseconds after the
// start shows counts but no rate (it would read as billions a second).
func TestProgressFirstFrameHasNoRate(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var buf strings.Builder
	p := newProgress(&buf, "copying", "tasks", 100, true)
	p.start = start
	if got := p.render(start.Add(7 * time.Microsecond)); strings.Contains(got, "/s") || !strings.Contains(got, "0 tasks") {
		t.Fatalf("first frame %q", got)
	}
	p.items = 50
	if got := p.render(start.Add(500 * time.Millisecond)); !strings.Contains(got, "100/s") {
		t.Fatalf("frame after half a second %q", got)
	}
}
