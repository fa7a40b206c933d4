package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/store"
)

// Concurrency limits how many tasks of a group and key value run at once,
// cluster-wide and atomically, also across many engines. Tasks over the
// limit stay ready and spend no attempt; a running task that defers
// (DeferUntil) gives its place back until it resumes.
type Concurrency struct {
	// Group names the limit: tasks of any workflow with the same group
	// and key value share it. Defaults to "workflow.task".
	Group string
	// Key is a dotted path into the run input ("customer", "account.id")
	// whose value keys the limit; "" is one limit for the whole group.
	Key string
	// Max is how many may run at once (at least 1).
	Max int
}

// RateLimit limits how many tasks of a group and key value start in any
// window of length Per, cluster-wide, by the database clock. A task held
// back stays ready with its available_at moved to when it may start, and
// spends no attempt.
type RateLimit struct {
	// Group names the limit; required when Key is set. Defaults to
	// "workflow.task" when both are empty.
	Group string
	// Key is a dotted path into the run input; "" is one limit for the group.
	Key string
	// Limit is how many starts a window may hold (at least 1).
	Limit int
	// Per is the window's length (at least a millisecond).
	Per time.Duration
}

// flowWaitMax bounds the wait between two tries of a keyed task to
// resume while its key is full.
const flowWaitMax = 2 * time.Second

// resumeKeyed re-acquires a slot and the key's place for a parked task
// with a concurrency key: its key may be full (others took the place it
// gave back), so it takes a plain slot (no hand-off: a completion write
// does not check keys), asks for the place, and while the key is full
// gives the slot back and tries again after a jittered backoff or a
// signal.
func (e *Engine) resumeKeyed(ctx context.Context, ex *execution) error {
	var bo *backoff.Backoff
	for {
		if err := ex.q.Slots.Acquire(ctx); err != nil {
			return err
		}
		ex.HoldsSlot.Store(true)
		moved, full, err := e.st.TaskResumeKeyed(ctx, e.workerID, store.ResumeTask{ID: ex.Task.ID, Attempt: ex.Task.Attempt}, e.cfg.LeaseDuration)
		switch {
		case err != nil:
			ex.settled(err)
			return fmt.Errorf("resume task: %w", err)
		case moved:
			ex.Parked.Store(false)
			return nil
		case !full:
			ex.settled(ErrTaskLost)
			return fmt.Errorf("resume task: %w", ErrTaskLost)
		}
		if ex.HoldsSlot.Swap(false) {
			ex.q.Slots.Release(1)
		}
		if bo == nil {
			bo = backoff.New(rand.Float64)
		}
		wait := min(bo.Next(), flowWaitMax)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-ex.Signal:
		case <-timer.C:
		}
		timer.Stop()
	}
}
