package norn

import (
	"slices"
	"time"
)

// Batch claims (ClaimRequest.Min and Linger): every store gathers the
// same way, from what it can count cheaply: how many tasks are ready in
// the claim's queues (counted up to Min) and when the one ready longest
// became ready.

// Gathered decides whether a batch claim takes tasks now, given ready
// (the ready tasks of its queues, counted up to r.Min) and oldest (when
// the one ready longest became ready). When it does not, retry is when
// the answer changes by itself (the linger of the oldest ends; zero when
// only new tasks can change it).
func (r *ClaimRequest) Gathered(ready int, oldest, now time.Time) (take bool, retry time.Time) {
	if r.Min <= 1 || ready >= r.Min {
		return true, time.Time{}
	}
	if ready == 0 || r.Linger <= 0 {
		return false, time.Time{}
	}
	due := oldest.Add(r.Linger.D())
	if !now.Before(due) {
		return true, time.Time{}
	}
	return false, due
}

// Group claims (ClaimRequest.GroupBy) gather per group: a store lists the
// groups that can give a task now, in claim order of each group's first
// such task, with each group's counts over the claim's queues, and
// ChooseGroup picks the group the answer is made of.

// GroupStats is what a store counts of one group of a group_by claim.
type GroupStats struct {
	// Ready counts the group's ready tasks in the claim's open queues
	// (at least up to Min: beyond it the count changes nothing).
	Ready int
	// Oldest is when the group's task ready longest became ready (needed
	// only while Ready is below Min).
	Oldest time.Time
}

// ChooseGroup decides which group a group_by claim takes, given the
// groups in claim order: the first one Gathered takes, as i (-1: none).
// When it takes none, retry is when one of them would be taken by itself
// (its linger ends; zero when only new tasks can change the answer).
// Without Min (or Min 1) the first group is taken: the answer is the
// ordinary claim's, kept to one group.
func (r *ClaimRequest) ChooseGroup(groups []GroupStats, now time.Time) (i int, retry time.Time) {
	for i, g := range groups {
		take, due := r.Gathered(g.Ready, g.Oldest, now)
		if take {
			return i, time.Time{}
		}
		if !due.IsZero() && (retry.IsZero() || due.Before(retry)) {
			retry = due
		}
	}
	return -1, retry
}

// ValidateGroupBy checks a GroupBy value: the values of FairBy.
func ValidateGroupBy(field, v string) error {
	return validateKeyChoice(field, v, "grouping off")
}

// GroupOf returns the value a task with the given concurrency key and
// labels has under r.GroupBy: "" when the claim does not
// group or the task has no such value.
func (r *ClaimRequest) GroupOf(concurrencyKey string, labels map[string]string) string {
	return QueueFlow{FairBy: r.GroupBy}.FairKey(concurrencyKey, labels)
}

// DistinctQueues returns queues without repeats, first occurrence first:
// a group claim counts each queue's tasks once, however often the claim
// names it.
func DistinctQueues(queues []string) []string {
	for i, q := range queues {
		if slices.Contains(queues[:i], q) {
			out := slices.Clone(queues[:i])
			for _, q := range queues[i:] {
				if !slices.Contains(out, q) {
					out = append(out, q)
				}
			}
			return out
		}
	}
	return queues
}
