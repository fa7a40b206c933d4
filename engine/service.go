package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/store"
)

// service is a background loop of the engine (see internal/maint): Start
// returns at once, Stop waits for it to end and is safe twice.
type service interface {
	Start(ctx context.Context) error
	Stop()
}

// errLeaseLost is the cause given to a handler whose task the heartbeat
// found no longer held by this worker.
var errLeaseLost = fmt.Errorf("%w: lease lost", ErrTaskLost)

// renewWithin is how close to expiry a lease must be for a heartbeat to
// renew it: once it is two intervals old. A lease left alone still has
// most of its time (lease - 3 intervals at worst) at the next beat, and
// thousands of deferred tasks are rewritten (and locked) every third beat
// or so instead of at every beat. 0 (renew every lease at every beat) when
// the lease is short next to the interval.
func renewWithin(lease, every time.Duration) time.Duration {
	r := lease - 2*every
	if r < lease/2 {
		return 0
	}
	return r
}

// heartbeatOnce renews the worker row and its task leases, and stops
// handlers whose task this worker no longer holds. It first retries a
// failed write of the worker's handles (see syncHandles).
func (e *Engine) heartbeatOnce(ctx context.Context) error {
	e.syncHandlesIfDirty()
	asked := e.cfg.Clock()
	held, err := e.st.WorkerHeartbeat(ctx, store.WorkerHeartbeatParams{WorkerID: e.workerID,
		Lease: e.cfg.LeaseDuration, RenewWithin: renewWithin(e.cfg.LeaseDuration, e.cfg.HeartbeatInterval)})
	if err != nil {
		return err
	}
	// Only executions started before the query can be judged: a claim that
	// committed while the query waited on row locks is not in its
	// snapshot. Finished ones are left to their completion write, whose
	// compare-and-set settles whether the task was still theirs.
	keep := make(map[int64]bool, len(held))
	for _, id := range held {
		keep[id] = true
	}
	e.releaseStrays(ctx, held)
	e.execs.Range(func(k, v any) bool {
		id := k.(int64)
		ex := v.(*execution)
		if !keep[id] && !ex.finished.Load() && ex.started.Before(asked) {
			e.log.WarnContext(ctx, "lease lost: stopping handler", slog.Int64("task", id))
			ex.cancel(errLeaseLost)
		}
		return true
	})
	for name, q := range e.queues {
		slotsTotal.WithLabelValues(name).Set(float64(q.size))
		slotsInUse.WithLabelValues(name).Set(float64(q.size - q.slots.Available()))
	}
	return nil
}

// releaseStrays gives back tasks the database says this worker holds but
// no handler of this process runs (a claim whose reply was lost): once
// seen so continuously for a whole lease duration, they return to ready.
// Without this the heartbeat would keep their leases alive forever. The
// wait is long on purpose: a claim commits before its reply is read, so a
// starved claiming goroutine can leave a just-claimed task briefly absent
// from the executions.
func (e *Engine) releaseStrays(ctx context.Context, held []int64) {
	e.strayMu.Lock()
	defer e.strayMu.Unlock()
	now := e.cfg.Clock()
	seen := map[int64]time.Time{}
	var items []store.TransitionItem
	reason := "claimed by this worker but never started (lost claim reply)"
	for _, id := range held {
		if _, running := e.execs.Load(id); running {
			continue
		}
		first, ok := e.strays[id]
		if !ok {
			first = now
		}
		seen[id] = first
		if now.Sub(first) >= e.cfg.LeaseDuration {
			items = append(items, store.TransitionItem{TaskID: id, To: store.StatusReady, Error: &reason})
		}
	}
	e.strays = seen
	if len(items) == 0 {
		return
	}
	moved, released, err := e.st.TransitionAll(ctx, store.TransitionParams{From: []string{store.StatusRunning, store.StatusDeferred},
		WorkerID: e.workerID, Items: items})
	if err != nil {
		e.log.WarnContext(ctx, "release stray tasks", slog.Any("error", err))
		return
	}
	countMoves(moved, released)
	for _, m := range moved {
		e.log.WarnContext(ctx, "released a task this worker held without running it", slog.Int64("task", m.TaskID))
		delete(e.strays, m.TaskID)
	}
}
