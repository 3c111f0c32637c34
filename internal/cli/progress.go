package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Progress draws a one-line progress bar on a terminal (normally stderr)
// for long operations such as batch submits, bulk deletes or benchmarks.
// It redraws at most every RedrawEvery, so callers may update it in tight
// loops. When the writer is not a terminal it stays silent: progress bars
// in log files are noise, and the command prints a summary anyway.
//
// Work is counted twice: Done/Total in any unit that measures completion
// (bytes of an input file, tasks of a known total) and Items, the number
// of things processed, shown with their rate.
type Progress struct {
	// Label is printed before the bar ("submitting").
	Label string
	// Unit names the items ("tasks").
	Unit string
	// RedrawEvery throttles redraws (default 100ms).
	RedrawEvery time.Duration
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time

	mu      sync.Mutex
	w       io.Writer
	enabled bool
	total   int64
	done    int64
	items   int64
	start   time.Time
	drawn   time.Time
	width   int // length of the last line drawn, to blank it out
}

// NewProgress returns a bar drawing on w when w is a terminal. total may be
// 0 when unknown (the bar then shows only counts and rate).
func NewProgress(w io.Writer, label, unit string, total int64) *Progress {
	f, ok := w.(*os.File)
	return newProgress(w, label, unit, total, ok && isTerminal(f))
}

func newProgress(w io.Writer, label, unit string, total int64, enabled bool) *Progress {
	p := &Progress{Label: label, Unit: unit, RedrawEvery: 100 * time.Millisecond, Now: time.Now,
		w: w, enabled: enabled, total: total}
	p.start = p.Now()
	return p
}

// Set records progress: done out of the total, and items processed so far.
func (p *Progress) Set(done, items int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.items = done, items
	if !p.enabled {
		return
	}
	now := p.Now()
	if now.Sub(p.drawn) < p.RedrawEvery {
		return
	}
	p.drawn = now
	p.draw(now)
}

// Finish draws the final state and ends the line.
func (p *Progress) Finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.enabled {
		return
	}
	if p.total > 0 {
		p.done = p.total
	}
	p.draw(p.Now())
	fmt.Fprintln(p.w)
	p.enabled = false
}

// Clear erases the bar (before printing an error, say) and stops drawing.
func (p *Progress) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.enabled {
		return
	}
	fmt.Fprint(p.w, "\r"+strings.Repeat(" ", p.width)+"\r")
	p.enabled = false
}

const barWidth = 30

// minRateWindow is the least elapsed time a rate is shown over.
const minRateWindow = 250 * time.Millisecond

// render formats the current state (without the leading carriage return).
func (p *Progress) render(now time.Time) string {
	var b strings.Builder
	b.WriteString(p.Label)
	if p.total > 0 {
		frac := float64(p.done) / float64(p.total)
		if frac > 1 {
			frac = 1
		}
		if frac < 0 {
			frac = 0
		}
		fill := int(frac * barWidth)
		b.WriteString(" [")
		b.WriteString(strings.Repeat("=", fill))
		if fill < barWidth {
			b.WriteString(">")
			b.WriteString(strings.Repeat(" ", barWidth-fill-1))
		}
		fmt.Fprintf(&b, "] %3d%%", int(frac*100))
	}
	fmt.Fprintf(&b, " %d %s", p.items, p.Unit)
	// A rate over less than a quarter second is noise (the first frame,
	// a few microseconds in, read as billions a second): none is shown.
	if el := now.Sub(p.start); el >= minRateWindow {
		rate := float64(p.items) / el.Seconds()
		fmt.Fprintf(&b, " %.0f/s", rate)
		if p.total > 0 && p.done > 0 && p.done < p.total {
			eta := time.Duration(float64(el) * float64(p.total-p.done) / float64(p.done))
			fmt.Fprintf(&b, " ETA %s", eta.Round(time.Second))
		}
	}
	return b.String()
}

func (p *Progress) draw(now time.Time) {
	s := p.render(now)
	pad := ""
	if n := p.width - len(s); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprint(p.w, "\r"+s+pad)
	p.width = len(s)
}
