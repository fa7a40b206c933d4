package executor

import (
	"context"
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/store"
)

// DrainConfig is how a shutdown stops the handlers (see Running.Drain).
type DrainConfig struct {
	Grace time.Duration // the running handlers' time to return
	// Hard is the time handlers that ignore the cancel at the end of the
	// grace get before their tasks are interrupted without them.
	Hard time.Duration
	// ProgressEvery is how often Drain says what it waits for.
	ProgressEvery time.Duration
	Cause         error // given to the handlers it cancels
	Clock         func() time.Time
	Logger        *slog.Logger
	// Interrupt writes the interrupt rule for the tasks of the handlers
	// that did not return after Hard.
	Interrupt func(ctx context.Context, items []store.TransitionItem)
}

// Drain stops the handlers for a shutdown. Parked tasks run no code of
// theirs: they need no grace and are cancelled at once (a task in a
// durable wait goes back to ready, its next attempt waiting for what is
// left; one parked in DeferUntil is interrupted as a running one would
// be at the deadline). Running handlers get Grace, or until ctx is done,
// whichever comes first; then they are cancelled, and those that still
// run after Hard have the interrupt rule written without them. It
// returns when every handler returned or was interrupted, leaving the
// handlers' context cancelled.
func (r *Running[E]) Drain(ctx context.Context, c DrainConfig) {
	bg := context.WithoutCancel(ctx)
	parked := 0
	r.Range(func(_ int64, ex E) bool {
		if x := ex.Exec(); x.InWait.Load() || x.Parked.Load() {
			x.Cancel(c.Cause)
			parked++
		}
		return true
	})
	deadline := c.Clock().Add(c.Grace)
	c.Logger.InfoContext(bg, "engine shutting down", slog.Duration("grace", c.Grace),
		slog.Int("handlers", r.Count()-parked), slog.Int("parked_interrupted", parked))

	done := r.Returned()
	grace := time.NewTimer(c.Grace)
	defer grace.Stop()
	progress := time.NewTicker(c.ProgressEvery)
	defer progress.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-grace.C:
			break wait
		case <-ctx.Done():
			break wait
		case <-progress.C:
			c.Logger.InfoContext(bg, "waiting for running handlers to return", slog.Int("handlers", r.Count()),
				slog.Duration("deadline_in", deadline.Sub(c.Clock()).Round(time.Second)))
		}
	}
	defer r.CancelAll(c.Cause)
	select {
	case <-done:
		return
	default:
	}
	c.Logger.WarnContext(bg, "grace period over: cancelling running handlers", slog.Int("handlers", r.Count()))
	r.CancelAll(c.Cause)
	hard := time.NewTimer(c.Hard)
	defer hard.Stop()
	select {
	case <-done:
	case <-hard.C:
		var items []store.TransitionItem
		r.Range(func(_ int64, ex E) bool {
			items = append(items, ex.Exec().InterruptItem("handler did not stop at shutdown"))
			return true
		})
		if len(items) > 0 {
			c.Interrupt(bg, items)
		}
	}
}
