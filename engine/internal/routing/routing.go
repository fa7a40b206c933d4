// Package routing keeps the worker row's handles: the "workflow.task"
// names this engine registered. A worker's claims take only those tasks,
// so a task of a workflow this process does not know stays ready, with no
// attempt spent, for a worker that can run it. The handles follow
// Engine.Register, also after Start.
package routing

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cairnhq/cairn/store"
)

// Store is what the router writes: the worker row and its handles.
type Store interface {
	WorkerRegister(ctx context.Context, p store.WorkerRegisterParams) (int64, error)
	WorkerSetHandles(ctx context.Context, workerID int64, handles []string) error
}

// Config is a Router's setup.
type Config struct {
	Store  Store
	Name   string         // the worker's name
	Queues map[string]int // slots per queue, stored on the worker row
	// Handles returns the current "workflow.task" names, sorted.
	Handles func() []string
	// Changed runs after the handles were written: tasks of a workflow
	// registered after Start may be waiting for a claim.
	Changed func()
	Lease   time.Duration // the longest a write of the handles takes
	Logger  *slog.Logger
}

// Router writes the worker row's handles. Its methods are safe for
// concurrent use; writes are ordered by one lock.
type Router struct {
	cfg Config

	mu     sync.Mutex
	worker int64           // 0 before Register and after Stop: nothing is written
	ctx    context.Context // the engine's loops' context, for writes
	dirty  bool            // the last write failed: retried by RetryFailed
}

// New returns a router; nothing is written before Register.
func New(cfg Config) *Router { return &Router{cfg: cfg} }

// Register inserts the worker row with the current handles and returns
// its id; from then on Sync keeps them up to date, writing under ctx (the
// engine's loops' context, which outlives Start's).
func (r *Router) Register(startCtx, ctx context.Context) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, err := r.cfg.Store.WorkerRegister(startCtx, store.WorkerRegisterParams{Name: r.cfg.Name, Queues: r.cfg.Queues, Handles: r.cfg.Handles()})
	if err != nil {
		return 0, err
	}
	r.worker, r.ctx = id, ctx
	return id, nil
}

// Stop stops writing the worker row (at Shutdown).
func (r *Router) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.worker = 0
}

// Sync writes the current handles to the worker row, once the worker is
// registered, and calls Changed. A failed write is logged and retried by
// RetryFailed (the heartbeat's); until then the worker claims as before,
// never a task it cannot run. The write takes at most Lease.
func (r *Router) Sync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.worker == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Lease)
	defer cancel()
	handles := r.cfg.Handles()
	if err := r.cfg.Store.WorkerSetHandles(ctx, r.worker, handles); err != nil {
		r.dirty = true
		r.cfg.Logger.WarnContext(ctx, "record registered workflows on the worker row; retried at the next heartbeat",
			slog.Int64("worker", r.worker), slog.Any("error", err))
		return
	}
	r.dirty = false
	r.cfg.Logger.DebugContext(ctx, "worker handles updated", slog.Int64("worker", r.worker), slog.Int("handles", len(handles)))
	if r.cfg.Changed != nil {
		r.cfg.Changed()
	}
}

// RetryFailed writes the handles again if the last write failed.
func (r *Router) RetryFailed() {
	r.mu.Lock()
	dirty := r.dirty
	r.mu.Unlock()
	if dirty {
		r.Sync()
	}
}
