package engine

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cairnhq/cairn/store"
)

// service runs once(ctx) every interval until stopped. A failed run is
// retried after a backoff (see dbHealth) instead of the interval. Start
// returns at once; Stop is safe twice or before Start.
type service struct {
	e        *Engine
	name     string
	every    time.Duration
	once     func(context.Context) error
	mu       sync.Mutex
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

func newService(e *Engine, name string, every time.Duration, once func(context.Context) error) *service {
	return &service{e: e, name: name, every: every, once: once}
}

func (s *service) Start(ctx context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.every)
		defer t.Stop()
		health := s.e.health.loop(s.name)
		bo := newBackoff(rand.Float64)
		failed := false
		for {
			err := s.once(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				failed = true
				health.fail(ctx, fmt.Errorf("%s: %w", s.name, err))
				if !s.e.health.wait(ctx, nil, bo.next()) {
					return
				}
				continue
			}
			health.ok(ctx)
			if failed {
				failed = false
				bo.reset()
				t.Reset(s.every) // drop a tick that came during the failures
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (s *service) Stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		cancel, done := s.cancel, s.done
		s.mu.Unlock()
		if cancel != nil {
			cancel()
			<-done
		}
	})
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
// handlers whose task this worker no longer holds.
func (e *Engine) heartbeatOnce(ctx context.Context) error {
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
		slotsInUse.WithLabelValues(name).Set(float64(q.size - q.slots.available()))
	}
	return nil
}

// rescueOnce applies the interrupt rule to tasks whose lease expired
// (their worker died): requeue_on_interrupt -> ready, otherwise
// interrupted; after max_rescues the task fails with the reason recorded.
// Each move is compare-and-set on the expired lease, so a task that
// finished or heartbeated meanwhile is left alone. Workers silent for a
// lease are then marked lost: after the tasks, so that a worker whose
// tasks this pass rescued (their leases outlast its last heartbeat by at
// least a lease) is shown lost by the same pass.
func (e *Engine) rescueOnce(ctx context.Context) error {
	if err := e.rescueExpired(ctx); err != nil {
		return err
	}
	_, err := e.st.WorkerMarkLost(ctx, e.cfg.LeaseDuration)
	return err
}

func (e *Engine) rescueExpired(ctx context.Context) error {
	for {
		tasks, err := e.st.TaskExpiredLeases(ctx, 500)
		if err != nil || len(tasks) == 0 {
			return err
		}
		items := make([]store.TransitionItem, len(tasks))
		for i, t := range tasks {
			items[i] = rescueItem(t)
		}
		moved, released, err := e.st.TransitionAll(ctx, store.TransitionParams{From: []string{store.StatusRunning, store.StatusDeferred},
			LeaseExpired: true, Items: items})
		if err != nil {
			return fmt.Errorf("rescue: %w", err)
		}
		countMoves(moved, released)
		for _, m := range moved {
			e.log.WarnContext(ctx, "rescued task from a dead worker", slog.Int64("task", m.TaskID), slog.String("to", m.To))
		}
		if len(tasks) < 500 || len(moved) == 0 {
			return nil
		}
	}
}

func rescueItem(t store.Task) store.TransitionItem {
	worker := int64(0)
	if t.WorkerID != nil {
		worker = *t.WorkerID
	}
	reason := fmt.Sprintf("lease expired: worker %d stopped heartbeating", worker)
	item := store.TransitionItem{TaskID: t.ID, Attempt: t.Attempt, Rescue: true, Error: &reason}
	switch {
	case t.Rescues+1 > t.MaxRescues:
		reason = fmt.Sprintf("%s; rescued %d times (max_rescues %d): the task keeps losing its worker", reason, t.Rescues+1, t.MaxRescues)
		item.To = store.StatusFailed
	case t.RequeueOnInterrupt:
		item.To = store.StatusReady
	default:
		item.To = store.StatusInterrupted
	}
	return item
}

// pruneOnce deletes runs finished longer ago than Config.Retention.
func (e *Engine) pruneOnce(ctx context.Context) error {
	if e.cfg.Retention < 0 {
		return nil
	}
	n, err := e.st.RunPrune(ctx, e.cfg.Retention, 1000)
	if err == nil && n > 0 {
		e.log.InfoContext(ctx, "pruned finished runs", slog.Int64("runs", n))
	}
	return err
}

// foldCountsOnce folds the task count deltas written by the tasks
// triggers, so the overview and /metrics read a few rows.
func (e *Engine) foldCountsOnce(ctx context.Context) error {
	_, err := e.st.TaskCountsFold(ctx)
	return err
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
