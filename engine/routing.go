package engine

import (
	"context"
	"log/slog"
	"slices"

	"github.com/cairnhq/cairn/store"
)

// Routing: the worker row lists the "workflow.task" names this engine
// registered (its handles), and its claims take only those tasks, so a
// task of a workflow this process does not know stays ready, with no
// attempt spent, for a worker that can run it. The handles follow
// Register, also after Start.

// handles returns the "workflow.task" names of the registered workflows,
// sorted.
func (e *Engine) handles() []string {
	e.wfMu.RLock()
	defer e.wfMu.RUnlock()
	out := []string{}
	for name, d := range e.workflows {
		for _, t := range d.wf.Tasks {
			out = append(out, name+"."+t.Name)
		}
	}
	slices.Sort(out)
	return out
}

// registerWorker inserts the worker row with the current handles; from
// then on Register keeps them up to date.
func (e *Engine) registerWorker(ctx context.Context) (int64, error) {
	e.routeMu.Lock()
	defer e.routeMu.Unlock()
	id, err := e.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: e.cfg.WorkerName, Queues: e.slotsByQueue(), Handles: e.handles()})
	if err != nil {
		return 0, err
	}
	e.routeWorker, e.routeCtx = id, e.loopsCtx
	return id, nil
}

// stopRouting stops Register from writing the worker row (at Shutdown).
func (e *Engine) stopRouting() {
	e.routeMu.Lock()
	defer e.routeMu.Unlock()
	e.routeWorker = 0
}

// syncHandles writes the current handles to the worker row, once the
// worker is registered, and wakes the claim loops: tasks of a workflow
// registered after Start may be waiting. A failed write is logged and
// retried at the next heartbeat (see syncHandlesIfDirty); until then the
// worker claims as before, never a task it cannot run. The write takes at
// most a lease duration.
func (e *Engine) syncHandles() {
	e.routeMu.Lock()
	defer e.routeMu.Unlock()
	if e.routeWorker == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(e.routeCtx, e.cfg.LeaseDuration)
	defer cancel()
	handles := e.handles()
	if err := e.st.WorkerSetHandles(ctx, e.routeWorker, handles); err != nil {
		e.routeDirty = true
		e.log.WarnContext(ctx, "record registered workflows on the worker row; retried at the next heartbeat",
			slog.Int64("worker", e.routeWorker), slog.Any("error", err))
		return
	}
	e.routeDirty = false
	e.log.DebugContext(ctx, "worker handles updated", slog.Int64("worker", e.routeWorker), slog.Int("handles", len(handles)))
	e.wakeAll()
}

// syncHandlesIfDirty retries a failed write of the handles.
func (e *Engine) syncHandlesIfDirty() {
	e.routeMu.Lock()
	dirty := e.routeDirty
	e.routeMu.Unlock()
	if dirty {
		e.syncHandles()
	}
}
