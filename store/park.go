package store

import (
	"context"
	"fmt"
	"time"
)

// This file holds the ways a worker takes its deferred (parked) tasks
// back into running. Parking itself is a transition to deferred
// (Transition, or TaskDeferAndClaim and TaskParkAndClaimOne with the
// claim of the slots it frees, in claim.go).

// TaskResume moves a deferred task held by workerID back to running (its
// slot was re-acquired) and renews its lease.
func (s *Store) TaskResume(ctx context.Context, workerID, taskID int64, lease time.Duration) (bool, error) {
	moved, err := s.TaskResumeBatch(ctx, TaskResumeParams{WorkerID: workerID, Tasks: []ResumeTask{{ID: taskID}}, Lease: lease})
	return len(moved) > 0, err
}

// ResumeTask names one attempt of a deferred task (compare-and-set on both).
type ResumeTask struct {
	ID int64
	// Attempt, when non-zero, must equal the row's attempt.
	Attempt int
}

// TaskResumeParams are the deferred tasks a worker takes back (their
// slots were re-acquired) and the lease they get.
type TaskResumeParams struct {
	WorkerID int64
	Tasks    []ResumeTask
	Lease    time.Duration
}

// TaskResumeBatch moves deferred tasks held by p.WorkerID back to running
// and renews their leases, in one statement and transaction (an event per
// move). It returns the moves that took place: a task missing from them
// is no longer deferred on this worker (cancelled, rescued, or another
// attempt).
func (s *Store) TaskResumeBatch(ctx context.Context, p TaskResumeParams) ([]Moved, error) {
	items := make([]TransitionItem, len(p.Tasks))
	for i, t := range p.Tasks {
		items[i] = TransitionItem{TaskID: t.ID, To: StatusRunning, Attempt: t.Attempt, LeaseMs: p.Lease.Milliseconds()}
	}
	moved, err := s.Transition(ctx, TransitionParams{From: []string{StatusDeferred}, WorkerID: p.WorkerID, Items: items})
	if err != nil {
		return nil, fmt.Errorf("resume %d deferred tasks: %w", len(items), err)
	}
	return moved, nil
}

// TaskResumeKeyed moves a deferred task held by workerID that has a
// concurrency key back to running, if its key has room: the key's row is
// locked first (waiting for it) and read on its latest version. It
// reports whether the task moved and, when not, whether it was for lack
// of room (false: the row is no longer this attempt's deferred row).
func (s *Store) TaskResumeKeyed(ctx context.Context, workerID int64, task ResumeTask, lease time.Duration) (moved, full bool, err error) {
	err = s.InTx(ctx, func(tx *Store) error {
		// The lock first; the count in a statement of its own, whose
		// snapshot sees every claim and resume of the key committed
		// before the lock was granted.
		var key []string
		if err := tx.raw(`SELECT f.key FROM ?schema.flow_keys f
			WHERE f.key = (SELECT conc_key FROM ?schema.tasks WHERE id = ?) FOR UPDATE`, task.ID).Scan(ctx, &key); err != nil {
			return err
		}
		if len(key) == 1 {
			var room int
			if err := tx.raw(`SELECT f.max_running - (SELECT count(*) FROM ?schema.tasks t WHERE t.conc_key = f.key AND t.status = 'running')::int
				FROM ?schema.flow_keys f WHERE f.key = ?`, key[0]).Scan(ctx, &room); err != nil {
				return err
			}
			if room <= 0 {
				// Keyed claims leave this task its place while it says
				// it waits for one (see migration 028).
				full = true
				_, err := tx.exec(ctx, `UPDATE ?schema.tasks SET resume_wanted_at = now() WHERE id = ? AND status = 'deferred'`, task.ID)
				return err
			}
		}
		m, err := tx.Transition(ctx, TransitionParams{From: []string{StatusDeferred}, WorkerID: workerID,
			Items: []TransitionItem{{TaskID: task.ID, To: StatusRunning, Attempt: task.Attempt, LeaseMs: lease.Milliseconds()}}})
		moved = len(m) > 0
		if err != nil || !moved || len(key) == 0 {
			return err
		}
		// Claims that read the count in a snapshot from before this
		// commit learn of the move from the counter (see above).
		if _, err := tx.exec(ctx, `UPDATE ?schema.flow_keys SET claims = claims + 1 WHERE key = ?`, key[0]); err != nil {
			return err
		}
		_, err = tx.exec(ctx, `UPDATE ?schema.tasks SET resume_wanted_at = NULL WHERE id = ? AND resume_wanted_at IS NOT NULL`, task.ID)
		return err
	})
	if err != nil {
		return false, false, fmt.Errorf("resume keyed task %d: %w", task.ID, err)
	}
	return moved, full, nil
}
