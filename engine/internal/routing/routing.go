// Package routing keeps the worker row's handles and versions: the
// "workflow.task" names this engine registered and the "workflow@version"
// names it serves. A worker's claims take only those tasks, of those
// versions, so a task of a workflow (or a version of it) this process
// does not know stays ready, with no attempt spent, for a worker that can
// run it. It also stores the registered workflows' definitions in
// workflow_versions, also for an engine without a worker. Both follow
// Engine.Register, also after Start.
package routing

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cairnhq/cairn/store"
)

// Store is what the router writes: the worker row, its handles and
// versions, and the workflows' definitions.
type Store interface {
	WorkerRegister(ctx context.Context, p store.WorkerRegisterParams) (int64, error)
	WorkerSetRouting(ctx context.Context, workerID int64, handles, versions []string) error
	WorkflowVersionSave(ctx context.Context, vs []store.WorkflowVersion) error
}

// Config is a Router's setup.
type Config struct {
	Store  Store
	Name   string         // the worker's name
	Queues map[string]int // slots per queue, stored on the worker row
	// Registered returns what is registered now.
	Registered func() Registered
	// Changed runs after the handles were written: tasks of a workflow
	// registered after Start may be waiting for a claim.
	Changed func()
	Lease   time.Duration // the longest a write of the handles takes
	Logger  *slog.Logger
}

// Registered is what an engine registered: the "workflow.task" names it
// runs, and its workflows' versions, to store (see
// store.WorkflowVersionSave); the worker serves each one's version and
// its compatible ones.
type Registered struct {
	Handles  []string
	Versions []store.WorkflowVersion
}

// handles returns the "workflow.task" names of reg, sorted, never nil.
func (reg Registered) handles() []string {
	return slices.Sorted(slices.Values(append([]string{}, reg.Handles...)))
}

// Router writes the worker row's handles. Its methods are safe for
// concurrent use; writes are ordered by one lock.
type Router struct {
	cfg Config

	mu     sync.Mutex
	open   bool            // between Register (or Open) and Stop: Sync writes
	worker int64           // the worker row (0: none, see Open)
	ctx    context.Context // the engine's loops' context, for writes
	dirty  bool            // the last write failed: retried by RetryFailed
}

// New returns a router; nothing is written before Register.
func New(cfg Config) *Router { return &Router{cfg: cfg} }

// Register stores the definitions and inserts the worker row with the
// current handles and versions, and returns its id; from then on Sync
// keeps them up to date, writing under ctx (the engine's loops' context,
// which outlives Start's).
func (r *Router) Register(startCtx, ctx context.Context) (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg, err := r.save(startCtx)
	if err != nil {
		return 0, err
	}
	id, err := r.cfg.Store.WorkerRegister(startCtx, store.WorkerRegisterParams{Name: r.cfg.Name, Queues: r.cfg.Queues,
		Handles: reg.handles(), Versions: reg.served()})
	if err != nil {
		return 0, err
	}
	r.open, r.worker, r.ctx = true, id, ctx
	return id, nil
}

// Open is Register for an engine without a worker: it stores the
// definitions, now and at each Sync.
func (r *Router) Open(startCtx, ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.save(startCtx); err != nil {
		return err
	}
	r.open, r.ctx = true, ctx
	return nil
}

// Stop stops writing (at Shutdown).
func (r *Router) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open, r.worker = false, 0
}

// save stores the versions registered now and returns what is.
func (r *Router) save(ctx context.Context) (Registered, error) {
	reg := r.cfg.Registered()
	return reg, r.cfg.Store.WorkflowVersionSave(ctx, reg.Versions)
}

// served returns the "workflow@version" names the worker serves: each
// version's own and its compatible ones, sorted, never nil.
func (reg Registered) served() []string {
	out := []string{}
	for _, d := range reg.Versions {
		out = append(out, d.Workflow+"@"+d.Version)
		for _, c := range d.Compatible {
			out = append(out, d.Workflow+"@"+c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Sync stores the definitions and writes the current handles and
// versions to the worker row, once registered (or open), and calls
// Changed. A failed write is logged and retried by RetryFailed (the
// heartbeat's); until then the worker claims as before, never a task it
// cannot run. The writes take at most Lease.
func (r *Router) Sync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.open {
		return
	}
	ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Lease)
	defer cancel()
	reg, err := r.save(ctx)
	handles := reg.handles()
	if err == nil && r.worker != 0 {
		err = r.cfg.Store.WorkerSetRouting(ctx, r.worker, handles, reg.served())
	}
	if err != nil {
		r.dirty = true
		r.cfg.Logger.WarnContext(ctx, "record registered workflows (definitions, worker row); retried at the next heartbeat",
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
