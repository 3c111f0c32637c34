package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nornq/norn"
)

// queueSeries returns the queue labels of metric name's samples and the sum
// of their values.
func queueSeries(text, name string) (queues map[string]bool, sum float64) {
	queues = map[string]bool{}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		if i := strings.Index(line, `queue="`); i >= 0 {
			rest := line[i+len(`queue="`):]
			queues[rest[:strings.IndexByte(rest, '"')]] = true
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		sum += v
	}
	return queues, sum
}

// TestMetricsSeriesBounded: queues get series of their own up to
// MetricsMaxQueues; the activity of the others is counted under
// queue="(other)", nothing is lost from the totals, and a queue's series
// go once it holds no tasks, freeing its place. Before, every queue ever
// used added series that were never removed (100,000 one-task queues: 9 MB
// of /metrics, 1.5 s a scrape, the series kept after every task was
// deleted).
func TestMetricsSeriesBounded(t *testing.T) {
	t.Parallel()
	e := startServer(t, func(c *Config) { c.MetricsMaxQueues = 5; c.MetricsInterval = time.Nanosecond })
	scrape := func() string { return string(e.must(200, "GET", "/metrics", "").body) }
	for i := range 20 {
		e.must(201, "POST", "/v1/tasks", fmt.Sprintf(`{"id":"t%d","queue":"q%02d"}`, i, i))
	}
	text := scrape()
	for _, name := range []string{"norn_tasks_submitted_total", "norn_tasks"} {
		qs, sum := queueSeries(text, name)
		if len(qs) != 6 || !qs[otherQueue] || sum != 20 {
			t.Errorf("%s: queues %v, sum %v; want 5 of their own, (other), 20 in all", name, qs, sum)
		}
	}
	if got := metricLine(text, "norn_metrics_queues"); got != "5" {
		t.Errorf("norn_metrics_queues = %q", got)
	}
	if got := metricLine(text, "norn_tasks", `queue="(other)"`, `status="ready"`); got != "15" {
		t.Errorf(`norn_tasks{queue="(other)",status="ready"} = %q, want 15`, got)
	}

	// Emptied queues lose their series and their places.
	e.must(200, "DELETE", "/v1/tasks?status=ready", "")
	text = scrape()
	if qs, _ := queueSeries(text, "norn_tasks_submitted_total"); len(qs) != 1 || !qs[otherQueue] {
		t.Errorf("series after every queue emptied: %v, want only (other)", qs)
	}
	if got := metricLine(text, "norn_metrics_queues"); got != "0" {
		t.Errorf("norn_metrics_queues after pruning = %q", got)
	}
	e.must(201, "POST", "/v1/tasks", `{"queue":"fresh"}`)
	if got := metricLine(scrape(), "norn_tasks_submitted_total", `queue="fresh"`); got != "1" {
		t.Errorf("a new queue after pruning: %q, want its own series", got)
	}
}

// TestMetricsStoreReadsAreSpaced: scrapes closer together than
// MetricsInterval share one read of the store, so polling /metrics
// in a loop cannot load the store.
func TestMetricsStoreReadsAreSpaced(t *testing.T) {
	t.Parallel()
	var stats countingStats
	e := startServer(t, func(c *Config) {
		stats.Store = c.Store
		c.Store = &stats
		c.MetricsInterval = time.Hour
	})
	for range 20 {
		e.must(200, "GET", "/metrics", "")
	}
	if n := stats.n.Load(); n != 1 {
		t.Errorf("20 scrapes read the store's stats %d times, want 1", n)
	}
}

// countingStats counts the Stats calls of the store it wraps.
type countingStats struct {
	norn.Store
	n atomic.Int64
}

func (c *countingStats) Stats(ctx context.Context) (norn.Stats, error) {
	c.n.Add(1)
	return c.Store.Stats(ctx)
}
