package notify

import (
	"context"
	"time"
)

// RunWait is what WaitRun needs of the engine for one run.
type RunWait struct {
	ID int64
	// Ended reads the run and reports whether it ended; its error ends
	// the wait.
	Ended func(ctx context.Context) (bool, error)
	// Mark asks the database to announce the run's end from now on.
	Mark func(ctx context.Context) error
	// Poll is how often the run is read without a listener; Recheck how
	// often with one, a safety net for a notification lost while the
	// listener reconnected (a reconnect also wakes every wait).
	Poll, Recheck time.Duration
}

// WaitRun returns once w.Ended says the run ended, or with the first
// error of Ended or Mark, or with ctx's error. It is woken by the
// database's notification of the run's end: it reads the run, marks it
// as awaited and reads it again (an end committed before the mark is not
// announced), then reads it each time it is woken, or at the latest
// every Recheck (Poll without a listener).
func (h *Hub) WaitRun(ctx context.Context, w RunWait) error {
	woken, done := h.AwaitRun(w.ID)
	defer done()
	every := w.Poll
	if h.Listening() {
		every = w.Recheck
	}
	var timer *time.Timer
	marked := false
	for {
		ended, err := w.Ended(ctx)
		if err != nil || ended {
			return err
		}
		if !marked {
			if err := w.Mark(ctx); err != nil {
				return err
			}
			marked = true
			continue
		}
		if timer == nil {
			timer = time.NewTimer(every)
			defer timer.Stop()
		} else {
			timer.Reset(every)
		}
		select {
		case <-woken:
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
