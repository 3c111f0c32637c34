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
		if _, err := tx.leaseOp(&norn.LeaseOp{Op: norn.OpSnooze, LeaseRef: ref, Snooze: sn}); err != nil {
			return err
		}
		out = tx.readAfter(ref.TaskID)
		return nil
	})
	return out, err
}

// snooze keeps the owner as the last owner and the lease number: the next
// claim increments it.
func (tx *txn) snooze(op *norn.LeaseOp) error {
	t, err := tx.leased(op.LeaseRef)
	if err != nil {
		return err
	}
	if op.Snooze.UntilSignal != "" {
		return tx.snoozeUntilSignal(t, op)
	}
	if op.Snooze.Scope == norn.SnoozeScopeKey {
		if err := tx.backOffKey(t, nanos(op.Snooze.SnoozeEnd(fromNanos(tx.now)))); err != nil {
			return err
		}
	}
	tx.giveBack(t, norn.AfterSnooze(fromNanos(tx.now), op.Snooze), op.LeaseRef)
	return nil
}
