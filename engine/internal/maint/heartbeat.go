package maint

import (
	"context"
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/outcome"
	"github.com/cairnhq/cairn/store"
)

// HeartbeatStore is what the heartbeat needs of the store.
type HeartbeatStore interface {
	WorkerHeartbeat(ctx context.Context, p store.WorkerHeartbeatParams) ([]int64, error)
	TransitionAll(ctx context.Context, p store.TransitionParams) (moved, released []store.Moved, err error)
}

// Tasks is the process's side of the heartbeat: the tasks its handlers
// run.
type Tasks interface {
	// Running reports whether a handler of this process runs task id.
	Running(id int64) bool
	// Handled returns the ids of the tasks handlers of this process run
	// (running or parked, their last write not yet committed).
	Handled() []int64
	// LoseAbsent stops the handlers of tasks the database no longer
	// gives this worker: those not in held that started before asked
	// (a claim committed while the heartbeat's query waited is not in its
	// snapshot) and are not finished (their completion write settles it).
	LoseAbsent(ctx context.Context, held map[int64]bool, asked time.Time)
}

// HeartbeatConfig builds a Heartbeat.
type HeartbeatConfig struct {
	Store    HeartbeatStore
	Tasks    Tasks
	WorkerID int64
	// Interval is the time between two beats; Lease the task lease.
	Interval, Lease time.Duration
	Clock           func() time.Time
	Logger          *slog.Logger
	Health          *backoff.Health
	// Before runs first at each beat (the engine retries a failed write
	// of its worker's handles); After runs after a beat that reached the
	// database (the engine's slot gauges). Either may be nil.
	Before, After func()
	// OnMoves is told every committed move (the transitions metric).
	OnMoves func(moves ...[]store.Moved)
}

// Heartbeat renews the worker row and its task leases, stops handlers
// whose task the worker no longer holds, and gives back tasks it holds
// that no handler runs.
type Heartbeat struct {
	*Service
	cfg    HeartbeatConfig
	within time.Duration
	every  int                 // a beat in every looks for strays (see FindEvery)
	beats  int                 // beats that reached the database; RunOnce only
	strays map[int64]time.Time // held in the database, not running here: since when; RunOnce only
}

// NewHeartbeat returns a heartbeat service called "heartbeat".
func NewHeartbeat(cfg HeartbeatConfig) *Heartbeat {
	h := &Heartbeat{cfg: cfg, within: RenewWithin(cfg.Lease, cfg.Interval), every: FindEvery(cfg.Lease, cfg.Interval)}
	h.Service = NewService("heartbeat", cfg.Interval, cfg.Health, h.RunOnce)
	return h
}

// FindEvery is how many beats pass between two that look for strays
// (the first beat is one). Every beat reads the tasks its handlers run
// and the strays already found, by primary key (see
// store.WorkerHeartbeatParams.Only); one that looks for strays also
// reads the tasks the worker holds whose lease runs past now
// (WorkerHeartbeatParams.Recent), a range of the lease index one lease
// of claims long, so that a long transaction holding back the xmin does
// not make a beat walk the index entries of every task run since. A
// stray (a claim whose reply was lost) is found within half a lease of
// its claim, a beat or more before its lease would expire unrenewed,
// and from then on is read at every beat like the others. One whose
// lease ran out unfound is the rescuer's.
func FindEvery(lease, every time.Duration) int {
	return max(1, int(lease/every)/2)
}

// RenewWithin is how close to expiry a lease must be for a heartbeat to
// renew it: once it is two intervals old. A lease left alone still has
// most of its time (lease - 3 intervals at worst) at the next beat, and
// thousands of deferred tasks are rewritten (and locked) every third beat
// or so instead of at every beat. 0 (renew every lease at every beat) when
// the lease is short next to the interval.
func RenewWithin(lease, every time.Duration) time.Duration {
	r := lease - 2*every
	if r < lease/2 {
		return 0
	}
	return r
}

// RunOnce beats once. It is called by the service's loop only (or by a
// test instead of it), never by two goroutines at once.
func (h *Heartbeat) RunOnce(ctx context.Context) error {
	if h.cfg.Before != nil {
		h.cfg.Before()
	}
	asked := h.cfg.Clock()
	// A row locked by another transaction is waited for up to an
	// interval, holding no other (see store.WorkerHeartbeat).
	p := store.WorkerHeartbeatParams{WorkerID: h.cfg.WorkerID, Lease: h.cfg.Lease, RenewWithin: h.within, LockWait: h.cfg.Interval}
	p.Only = h.cfg.Tasks.Handled()
	for id := range h.strays {
		p.Only = append(p.Only, id)
	}
	p.Recent = h.beats%h.every == 0
	held, err := h.cfg.Store.WorkerHeartbeat(ctx, p)
	if err != nil {
		return err
	}
	h.beats++
	keep := make(map[int64]bool, len(held))
	for _, id := range held {
		keep[id] = true
	}
	h.releaseStrays(ctx, held)
	h.cfg.Tasks.LoseAbsent(ctx, keep, asked)
	if h.cfg.After != nil {
		h.cfg.After()
	}
	return nil
}

// releaseStrays gives back tasks the database says this worker holds but
// no handler of this process runs (a claim whose reply was lost): once
// seen so continuously for a whole lease duration, they return to ready.
// Without this the heartbeat would keep their leases alive forever. The
// wait is long on purpose: a claim commits before its reply is read, so a
// starved claiming goroutine can leave a just-claimed task briefly absent
// from the running tasks.
func (h *Heartbeat) releaseStrays(ctx context.Context, held []int64) {
	now := h.cfg.Clock()
	seen := map[int64]time.Time{}
	var items []store.TransitionItem
	reason := "claimed by this worker but never started (lost claim reply)"
	for _, id := range held {
		if h.cfg.Tasks.Running(id) {
			continue
		}
		first, ok := h.strays[id]
		if !ok {
			first = now
		}
		seen[id] = first
		if now.Sub(first) >= h.cfg.Lease {
			items = append(items, outcome.Released(id, reason))
		}
	}
	h.strays = seen
	if len(items) == 0 {
		return
	}
	moved, released, err := h.cfg.Store.TransitionAll(ctx, store.TransitionParams{From: []string{store.StatusRunning, store.StatusDeferred},
		WorkerID: h.cfg.WorkerID, Items: items})
	if err != nil {
		h.cfg.Logger.WarnContext(ctx, "release stray tasks", slog.Any("error", err))
		return
	}
	if h.cfg.OnMoves != nil {
		h.cfg.OnMoves(moved, released)
	}
	for _, m := range moved {
		h.cfg.Logger.WarnContext(ctx, "released a task this worker held without running it", slog.Int64("task", m.TaskID))
		delete(h.strays, m.TaskID)
	}
}
