package maint

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/outcome"
	"github.com/cairnhq/cairn/store"
)

// rescueBatch is how many expired tasks one query fetches.
const rescueBatch = 500

// A pass looks only at the leases that expired since the previous pass
// read the database's clock, less rescueOverlap: the scan of the lease
// index then starts there, not at the entries of every task run since a
// long transaction began to hold back the xmin (see store.ClaimFloor).
// Both ends are the database's clock, so the windows of two passes meet
// however late either ran. The overlap is for a lease committed after
// the previous pass read the expired ones yet already expired before it
// read the clock: written by a transaction that ran longer than a lease.
// Every rescueFullEvery-th pass (once a minute by default), and the
// first, looks at all expired leases: one written expired by more than
// the overlap, or left by a failed pass, is found by it. A full pass
// walks those entries, so under a held snapshot its cost grows with the
// hold (385 ms 84 s into one at 4,300 tasks/s) and would take a growing
// share of a core: after one that took d, the next waits at least
// rescueFullSpacing times d, as the claim floor's refresh does.
const (
	rescueOverlap     = time.Second
	rescueFullEvery   = 12
	rescueFullSpacing = 40
)

// RescuerStore is what the rescuer needs of the store.
type RescuerStore interface {
	Now(ctx context.Context) (time.Time, error)
	TaskExpiredLeases(ctx context.Context, since time.Time, limit int) ([]store.Task, error)
	TransitionAll(ctx context.Context, p store.TransitionParams) (moved, released []store.Moved, err error)
	WorkerMarkLost(ctx context.Context, olderThan time.Duration) (int64, error)
}

// RescuerConfig builds a Rescuer.
type RescuerConfig struct {
	Store RescuerStore
	// Interval is the time between two passes.
	Interval time.Duration
	// Lease is the task lease: a worker silent for that long is lost.
	Lease time.Duration
	// Clock times the passes (time.Now when nil).
	Clock  func() time.Time
	Logger *slog.Logger
	Health *backoff.Health
	// OnMoves is told every committed move (the transitions metric).
	OnMoves func(moves ...[]store.Moved)
}

// Rescuer applies the interrupt rule to tasks whose worker died, and marks
// silent workers lost.
type Rescuer struct {
	*Service
	cfg RescuerConfig
	// RunOnce only: the database's clock when the last pass that
	// succeeded began, and how many have; when the last full one began
	// (by Clock), which pass it was and how long it took.
	lastPass     time.Time
	passes       int
	lastFull     time.Time
	lastFullPass int
	fullTook     time.Duration
}

// NewRescuer returns a rescuer service called "rescuer".
func NewRescuer(cfg RescuerConfig) *Rescuer {
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	r := &Rescuer{cfg: cfg}
	r.Service = NewService("rescuer", cfg.Interval, cfg.Health, r.RunOnce)
	return r
}

// RunOnce applies the interrupt rule to tasks whose lease expired
// (their worker died): requeue_on_interrupt -> ready, otherwise
// interrupted; after max_rescues the task fails with the reason recorded.
// A task deferred in a durable wait (Sleep, AwaitSignal) goes back to
// ready whatever requeue_on_interrupt says, and the rescue is not counted
// against max_rescues: no handler code of it was running.
// Each move is compare-and-set on the expired lease, so a task that
// finished or heartbeated meanwhile is left alone. Workers silent for a
// lease are then marked lost: after the tasks, so that a worker whose
// tasks this pass rescued (their leases outlast its last heartbeat by at
// least a lease) is shown lost by the same pass. Leases expire by the
// database's clock.
func (r *Rescuer) RunOnce(ctx context.Context) error {
	if err := r.rescueExpired(ctx); err != nil {
		return err
	}
	_, err := r.cfg.Store.WorkerMarkLost(ctx, r.cfg.Lease)
	return err
}

func (r *Rescuer) rescueExpired(ctx context.Context) error {
	start := r.cfg.Clock()
	full := r.passes == 0 ||
		r.passes-r.lastFullPass >= rescueFullEvery && start.Sub(r.lastFull) >= rescueFullSpacing*r.fullTook
	dbNow, err := r.cfg.Store.Now(ctx)
	if err != nil {
		return err
	}
	var since time.Time // zero: every expired lease
	if !full {
		since = r.lastPass.Add(-rescueOverlap)
	}
	if err := r.rescueSince(ctx, since); err != nil {
		return err
	}
	if full {
		r.lastFull, r.lastFullPass, r.fullTook = start, r.passes, r.cfg.Clock().Sub(start)
	}
	r.lastPass = dbNow
	r.passes++
	return nil
}

func (r *Rescuer) rescueSince(ctx context.Context, since time.Time) error {
	for {
		tasks, err := r.cfg.Store.TaskExpiredLeases(ctx, since, rescueBatch)
		if err != nil || len(tasks) == 0 {
			return err
		}
		items := make([]store.TransitionItem, len(tasks))
		for i, t := range tasks {
			items[i] = outcome.Rescued(t)
		}
		moved, released, err := r.cfg.Store.TransitionAll(ctx, store.TransitionParams{From: []string{store.StatusRunning, store.StatusDeferred},
			LeaseExpired: true, Items: items})
		if err != nil {
			return fmt.Errorf("rescue: %w", err)
		}
		r.cfg.OnMoves(moved, released)
		for _, m := range moved {
			r.cfg.Logger.WarnContext(ctx, "rescued task from a dead worker", slog.Int64("task", m.TaskID), slog.String("to", m.To))
		}
		if len(tasks) < rescueBatch || len(moved) == 0 {
			return nil
		}
	}
}
