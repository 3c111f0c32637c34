package norn

import "time"

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
