package faulttest

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nornq/norn"
	"github.com/nornq/norn/client"
)

// Report is what the checker found. Every list holds violations (capped
// at a few examples each; the counts are exact).
type Report struct {
	Attempted, Acked, Stored, Completed int
	// Missing: acknowledged submits the store does not hold.
	Missing          int
	AckedCompletions int
	// Executions: leases handed to workers; DuplicatesExecuted: the ones
	// beyond the first per task (at-least-once delivery re-running a task
	// whose lease ran out, or whose completion was lost with a node).
	Executions, DuplicatesExecuted int
	// Reassignments: assignments beyond the first per task in the store's
	// histories (includes claims whose answer never reached a worker).
	Reassignments int

	Lost, Unexpected, DoubleCompletion, Fencing, LeaseOverlap violations
	// RanAgain: tasks handed to a worker after a completion of theirs was
	// acknowledged (the completion was lost); TwoStates: tasks the store
	// listed more than once.
	RanAgain, TwoStates violations
}

type violations struct {
	N        int
	Examples []string
}

func (v *violations) add(format string, args ...any) {
	v.N++
	if len(v.Examples) < 10 {
		v.Examples = append(v.Examples, fmt.Sprintf(format, args...))
	}
}

func (v violations) String() string {
	if v.N == 0 {
		return "0"
	}
	return fmt.Sprintf("%d, e.g. %s", v.N, strings.Join(v.Examples, "; "))
}

// Problems lists every violated property, empty when the run was correct.
func (r *Report) Problems() []string { return r.problems(true) }

// Invariants lists the violated properties that hold even when the
// database loses acknowledged writes (a failover to an asynchronous
// standby): what the store holds is consistent, whatever it lost.
func (r *Report) Invariants() []string { return r.problems(false) }

func (r *Report) problems(losses bool) []string {
	var out []string
	for _, p := range []struct {
		name string
		v    violations
		loss bool // a consequence of acknowledged writes lost by the database
	}{
		{"lost", r.Lost, true}, {"unexpected", r.Unexpected, false}, {"two accepted completions", r.DoubleCompletion, true},
		{"fencing (an acknowledged completion under a lease that did not complete the task)", r.Fencing, true},
		{"overlapping leases", r.LeaseOverlap, false},
		{"ran again after an acknowledged completion", r.RanAgain, true},
		{"listed twice (a task in two states)", r.TwoStates, false},
	} {
		if p.v.N > 0 && (losses || !p.loss) {
			out = append(out, p.name+": "+p.v.String())
		}
	}
	return out
}

func (r *Report) String() string {
	return fmt.Sprintf("attempted %d, acknowledged %d, stored %d, completed %d, acknowledged completions %d, "+
		"executions %d (duplicates %d), reassignments in histories %d; lost %s, unexpected %s, double completions %s, "+
		"fencing %s, lease overlaps %s, ran again after an acknowledged completion %s, listed twice %s",
		r.Attempted, r.Acked, r.Stored, r.Completed, r.AckedCompletions, r.Executions, r.DuplicatesExecuted,
		r.Reassignments, r.Lost, r.Unexpected, r.DoubleCompletion, r.Fencing, r.LeaseOverlap, r.RanAgain, r.TwoStates)
}

// Check reads every task of the workload's queue, with its history,
// through c and compares the store with what the clients were told:
//
//   - lost: a submit was acknowledged but the task is missing or never
//     completed (Check runs after the queue drained);
//   - unexpected: a task no producer sent;
//   - two accepted completions: more than one TaskComplete in a history,
//     or more than one acknowledged completion (each from its own claim:
//     two under one lease number mean the number was handed out twice);
//   - fencing: a completion acknowledged under a lease other than the one
//     the history completed;
//   - overlapping leases: from the history, an assignment while the
//     previous lease was live, leases not increasing, or a lease ended by
//     timeout before its length had passed;
//   - ran again: a worker was handed a task after a completion of it was
//     acknowledged;
//   - listed twice: the store returned a task more than once.
func Check(ctx context.Context, c *client.Client, w *Workload) (*Report, error) {
	it, err := c.Stream(ctx, norn.Query{Filter: norn.Filter{Queues: []string{queue}}})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	return check(it, w)
}

// check is Check on the store's listing it.
func check(it norn.TaskIterator, w *Workload) (*Report, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := &Report{Attempted: len(w.attempted), Acked: len(w.acked)}
	for _, ls := range w.claims {
		r.Executions += len(ls)
		r.DuplicatesExecuted += len(ls) - 1
	}
	for _, ls := range w.completed {
		r.AckedCompletions += len(ls)
	}
	for id, leases := range w.ranAgain {
		r.RanAgain.add("%s handed out again under lease(s) %v after a completion under lease(s) %v was acknowledged", id, leases, w.completed[id])
	}
	seen := map[string]bool{}
	for it.Next() {
		t := it.Item()
		if seen[t.ID] {
			r.TwoStates.add("%s listed again, %s", t.ID, t.Status)
			continue
		}
		seen[t.ID] = true
		r.Stored++
		if !w.attempted[t.ID] {
			r.Unexpected.add("%s (%s) was never submitted", t.ID, t.Status)
		}
		if t.Status == norn.StatusCompleted {
			r.Completed++
		} else if w.acked[t.ID] {
			r.Lost.add("%s acknowledged but %s after the drain", t.ID, t.Status)
		}
		r.checkHistory(t, w.Lease, w.completed[t.ID])
	}
	if err := it.Err(); err != nil {
		return nil, err
	}
	for id := range w.acked {
		if !seen[id] {
			r.Missing++
			r.Lost.add("%s acknowledged but not in the store", id)
		}
	}
	for id := range w.completed {
		if !seen[id] {
			r.Lost.add("completion of %s acknowledged but the task is gone", id)
		}
		if !w.attempted[id] {
			r.Unexpected.add("completed %s, which was never submitted", id)
		}
	}
	return r, nil
}

func (r *Report) checkHistory(t *norn.Task, leaseLen time.Duration, acked []uint64) {
	var (
		live       bool
		cur        uint64
		assignedAt time.Time
		completes  []uint64
	)
	for i, h := range t.History {
		switch h.Type {
		case norn.TaskAssignment:
			if live {
				r.LeaseOverlap.add("%s: lease %d granted at %s while lease %d (granted %s) was live",
					t.ID, h.Lease, h.Time.Format(time.RFC3339Nano), cur, assignedAt.Format(time.RFC3339Nano))
			}
			if h.Lease <= cur {
				r.LeaseOverlap.add("%s: lease %d after lease %d", t.ID, h.Lease, cur)
			}
			if cur > 0 || t.HistoryDropped > 0 || i > 0 {
				r.Reassignments++
			}
			live, cur, assignedAt = true, h.Lease, h.Time
		case norn.TaskTimeout:
			if live && h.Time.Sub(assignedAt) < leaseLen {
				r.LeaseOverlap.add("%s: lease %d (granted %s) timed out after %v, before its %v had passed",
					t.ID, cur, assignedAt.Format(time.RFC3339Nano), h.Time.Sub(assignedAt), leaseLen)
			}
			live = false
		case norn.TaskYield, norn.TaskRetry, norn.TaskCancel, norn.TaskAbort:
			live = false
		case norn.TaskComplete:
			if !live || h.Lease != cur {
				r.LeaseOverlap.add("%s: completed under lease %d, live lease %d (live %v)", t.ID, h.Lease, cur, live)
			}
			completes = append(completes, h.Lease)
			live = false
		}
	}
	if len(completes) > 1 {
		r.DoubleCompletion.add("%s: %d TaskComplete entries (leases %v)", t.ID, len(completes), completes)
	}
	distinct := map[uint64]bool{}
	for _, l := range acked {
		distinct[l] = true
	}
	if len(acked) > 1 {
		r.DoubleCompletion.add("%s: completions acknowledged under leases %v", t.ID, acked)
	}
	if t.HistoryDropped > 0 {
		return // the completing entry may be among the dropped ones only if it is not the last
	}
	for l := range distinct {
		if len(completes) == 0 || completes[len(completes)-1] != l {
			r.Fencing.add("%s: completion under lease %d acknowledged, history completed %v (status %s)", t.ID, l, completes, t.Status)
		}
	}
}

// Monitor leadership and duties, from the nodes' logs.

const (
	msgLeads = "norn: this node now leads the monitor"
	msgLost  = "norn: lost the monitor leadership"
	msgSwept = "norn: monitor swept"
)

type interval struct {
	node       string
	start, end time.Time
	note       string
}

func recTime(rec map[string]any, key string) (time.Time, bool) {
	s, ok := rec[key].(string)
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	return t, err == nil
}

// leadership returns each node's monitor leadership intervals: from the
// line saying it leads to the line saying it lost the lead, its death, or
// until (still leading). A node never logs that it leads twice without
// losing the lead in between; a second such line means an end was not
// seen, and is returned as a problem (the new term starts there) instead
// of being merged into the previous term, which would hide a takeover.
func leadership(n *Node, until time.Time) ([]interval, []string) {
	var out []interval
	var odd []string
	var cur *interval
	kills := n.Kills()
	endAt := func(from time.Time) time.Time {
		for _, k := range kills {
			if k.After(from) {
				return k
			}
		}
		return until
	}
	for _, l := range n.Lines() {
		at, ok := recTime(l.Rec, "time")
		if !ok {
			continue
		}
		if cur != nil && endAt(cur.start).Before(at) {
			cur.end = endAt(cur.start)
			out = append(out, *cur)
			cur = nil
		}
		msg, _ := l.Rec["msg"].(string)
		switch {
		case msg == msgLeads:
			if cur != nil {
				odd = append(odd, fmt.Sprintf("%s logged that it leads at %s while it led since %s: the end of that term was not seen",
					n.Name, at.Format("15:04:05.000"), cur.start.Format("15:04:05.000")))
				cur.end = at
				out = append(out, *cur)
			}
			cur = &interval{node: n.Name, start: at}
		case strings.HasPrefix(msg, msgLost): // also "… during a sweep; sweep stopped"
			if cur != nil {
				cur.end = at
				out = append(out, *cur)
				cur = nil
			}
		}
	}
	if cur != nil {
		cur.end = endAt(cur.start)
		out = append(out, *cur)
	}
	return out, odd
}

// sweeps returns the node's monitor passes that changed something.
func sweeps(n *Node) []interval {
	var out []interval
	for _, l := range n.Lines() {
		if l.Rec["msg"] != msgSwept {
			continue
		}
		end, ok1 := recTime(l.Rec, "time")
		start, ok2 := recTime(l.Rec, "start")
		if ok1 && ok2 {
			out = append(out, interval{node: n.Name, start: start, end: end,
				note: fmt.Sprintf("timed_out=%v released=%v aborted=%v purged=%v", l.Rec["timed_out"], l.Rec["released"], l.Rec["aborted"], l.Rec["purged"])})
		}
	}
	return out
}

// Leader returns the node that currently leads the monitor by its logs
// (nil if none does).
func Leader(nodes []*Node) *Node {
	var best *Node
	var bestAt time.Time
	now := time.Now()
	for _, n := range nodes {
		if !n.Alive() {
			continue
		}
		ivs, _ := leadership(n, now.Add(time.Hour))
		if len(ivs) == 0 {
			continue
		}
		last := ivs[len(ivs)-1]
		if last.end.After(now) && last.start.After(bestAt) {
			best, bestAt = n, last.start
		}
	}
	return best
}

// MonitorReport is what CheckMonitor found.
type MonitorReport struct {
	Sweeps    int             // monitor passes that changed something
	Leads     int             // leadership terms
	Takeovers []time.Duration // leader stopped or killed → another node leads
	// FrozenSweeps: sweeps under way when their node was frozen, which
	// span the pause and are not judged as a second sweeper.
	FrozenSweeps int
	Problems     []string
}

// frozenInPause tells whether sweep s was under way when its node was
// frozen (SIGSTOP). Such a sweep spans the whole pause: it is the frozen
// leader's, it resumes after another node took over, and its late writes
// are compare-and-sets that cannot overwrite the new leader's
// (docs/reliability.md). It is not a second sweeper; every other overlap
// is.
func frozenInPause(s interval, events []Event) bool {
	for _, e := range events {
		name, _ := strings.CutSuffix(e.Target, " (leader)")
		// Under way when frozen: begun before the SIGSTOP, ended after
		// it. The signal is sent at some point between Start and Injected
		// (the nemesis first finds the leader), so a sweep the node began
		// in between was frozen too (on a loaded machine one can begin
		// milliseconds after Start). (Not "ended after Healed": the
		// resumed node can log the end before the nemesis records that
		// SIGCONT returned.)
		stop := e.Injected
		if stop.IsZero() {
			stop = e.Start
		}
		if e.Fault == "pause" && name == s.node && !s.start.After(stop) && s.end.After(stop) {
			return true
		}
	}
	return false
}

// CheckMonitor checks from the nodes' logs that the monitor's duties were
// done by one node at a time: no two nodes' sweeps overlap in time, every
// sweep ran while its node led, and when the leader was stopped or killed
// (by events) another node took the lead while it was away.
func CheckMonitor(nodes []*Node, events []Event, until time.Time) *MonitorReport {
	mr := &MonitorReport{}
	leads := map[string][]interval{}
	var all []interval
	problem := func(format string, args ...any) {
		if len(mr.Problems) < 20 {
			mr.Problems = append(mr.Problems, fmt.Sprintf(format, args...))
		}
	}
	for _, n := range nodes {
		var odd []string
		leads[n.Name], odd = leadership(n, until)
		for _, o := range odd {
			problem("%s", o)
		}
		mr.Leads += len(leads[n.Name])
		all = append(all, sweeps(n)...)
	}
	mr.Sweeps = len(all)
	ts := func(t time.Time) string { return t.Format("15:04:05.000") }
	sort.Slice(all, func(i, j int) bool { return all[i].start.Before(all[j].start) })
	var active []interval
	for _, s := range all {
		if frozenInPause(s, events) {
			mr.FrozenSweeps++
			continue
		}
		keep := active[:0]
		for _, a := range active {
			if a.end.After(s.start) {
				keep = append(keep, a)
				if a.node != s.node {
					problem("%s swept %s–%s (%s) while %s swept %s–%s (%s)", s.node, ts(s.start), ts(s.end), s.note,
						a.node, ts(a.start), ts(a.end), a.note)
				}
			}
		}
		active = append(keep, s)
		inside := false
		for _, l := range leads[s.node] {
			if !s.start.Before(l.start) && !s.end.After(l.end) {
				inside = true
				break
			}
		}
		if !inside {
			problem("%s swept %s–%s (%s) without leading the monitor", s.node, ts(s.start), ts(s.end), s.note)
		}
	}
	for _, e := range events {
		name, ok := strings.CutSuffix(e.Target, " (leader)")
		// Only a frozen or dead leader must be replaced while it is away;
		// a delayed or blackholed one keeps its session (and the lead)
		// until the session's idle limit, which may outlast the fault.
		if !ok || e.Err != nil || (e.Fault != "pause" && e.Fault != "kill") {
			continue
		}
		var first time.Time
		for _, n := range nodes {
			if n.Name == name {
				continue
			}
			for _, l := range leads[n.Name] {
				if l.start.After(e.Start) && (first.IsZero() || l.start.Before(first)) {
					first = l.start
				}
			}
		}
		if first.IsZero() || first.After(e.Healed) {
			problem("%s: the leader %s was away %v and no other node took over the monitor meanwhile",
				e.Fault, name, e.Healed.Sub(e.Start).Round(time.Millisecond))
			continue
		}
		mr.Takeovers = append(mr.Takeovers, first.Sub(e.Start))
	}
	return mr
}
