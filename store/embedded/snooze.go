package embedded

import (
	"context"

	"github.com/nornq/norn"
)

// Snooze puts a running task back for later without counting the attempt.
func (s *Store) Snooze(ctx context.Context, ref norn.LeaseRef, sn norn.Snooze) (*norn.Task, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	defer s.exit()
	var out *norn.Task
	err := s.run(func(tx *txn) error {
		if err := tx.snooze(ref, sn); err != nil {
			return err
		}
		out = tx.readAfter(ref.TaskID)
		return nil
	})
	return out, err
}

func (tx *txn) snooze(ref norn.LeaseRef, sn norn.Snooze) error {
	if err := sn.Validate(); err != nil {
		return err
	}
	if err := sn.ValidateRange(); err != nil {
		return err
	}
	t, err := tx.leased(ref)
	if err != nil {
		return err
	}
	o := norn.AfterSnooze(fromNanos(tx.now), sn)
	ns := tx.touch(t)
	ns.deadline = 0
	ns.progress = 0
	if ns.attempts > 0 {
		ns.attempts--
	}
	if o.Status == norn.StatusScheduled {
		ns.status = stScheduled
		ns.runAt = nanos(o.RunAt)
	} else {
		ns.status = stReady
		ns.runAt = tx.now
		ns.readyAt = tx.now
	}
	tx.history(t, &ns, norn.HistoryEntry{Type: norn.TaskSnooze, Worker: ref.Worker, Lease: ref.Lease, Progress: t.st.progress})
	tx.set(t, ns)
	tx.event(norn.EventKind(norn.TaskSnooze), t)
	return nil
}
