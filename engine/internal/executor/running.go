package executor

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Exec is an engine's execution: the executor's state inside it.
type Exec interface {
	Exec() *Execution
}

// Running are the executions of this process (running or parked) by
// task id, and their handler goroutines: each runs under a context of
// the handlers' own, which CancelAll cancels at the end of a shutdown's
// grace. The zero value holds none; Open readies it to run handlers.
type Running[E Exec] struct {
	byID   sync.Map // task id -> E
	wg     sync.WaitGroup
	ctx    context.Context
	cancel context.CancelCauseFunc
	run    func(ctx context.Context, ex E)
}

// Open readies r to run handlers: run, called by each goroutine Go
// starts, under a context derived from parent. Call it once, before Go.
func (r *Running[E]) Open(parent context.Context, run func(ctx context.Context, ex E)) {
	r.ctx, r.cancel = context.WithCancelCause(parent)
	r.run = run
}

// Go registers ex under its task's id and runs it in a goroutine of its
// own, under a context its Cancel cancels.
func (r *Running[E]) Go(ex E) {
	x := ex.Exec()
	ctx, cancel := context.WithCancelCause(r.ctx)
	x.Cancel = cancel
	r.byID.Store(x.Task.ID, ex)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.run(ctx, ex)
	}()
}

// Load returns the execution of task id, if this process holds it.
func (r *Running[E]) Load(id int64) (E, bool) {
	v, ok := r.byID.Load(id)
	if !ok {
		var zero E
		return zero, false
	}
	return v.(E), true
}

// Delete forgets the execution of task id: its last write committed.
func (r *Running[E]) Delete(id int64) { r.byID.Delete(id) }

// Range calls f for each execution until f returns false.
func (r *Running[E]) Range(f func(id int64, ex E) bool) {
	r.byID.Range(func(k, v any) bool { return f(k.(int64), v.(E)) })
}

// Count is how many executions r holds.
func (r *Running[E]) Count() int {
	n := 0
	r.byID.Range(func(_, _ any) bool { n++; return true })
	return n
}

// CancelAll cancels the context of every handler, running or to come,
// with cause. It does nothing before Open.
func (r *Running[E]) CancelAll(cause error) {
	if r.cancel != nil {
		r.cancel(cause)
	}
}

// Wait returns once every handler Go started has returned.
func (r *Running[E]) Wait() { r.wg.Wait() }

// Returned is closed once every handler Go started so far has returned
// (see Wait).
func (r *Running[E]) Returned() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	return done
}

// Leases are the heartbeat's side of the executions (maint.Tasks): it
// renews the leases of the tasks they hold and stops the handlers of
// those taken from this worker.
type Leases[E Exec] struct {
	Execs *Running[E]
	Log   *slog.Logger
	// Lost is the cause given to a handler whose task the heartbeat found
	// no longer held by this worker.
	Lost error
}

// Running reports whether a handler of this process runs task id.
func (l Leases[E]) Running(id int64) bool {
	_, ok := l.Execs.byID.Load(id)
	return ok
}

// Handled returns the ids of the tasks of the executions (running or
// parked, their last write not yet committed).
func (l Leases[E]) Handled() []int64 {
	ids := []int64{}
	l.Execs.byID.Range(func(k, _ any) bool {
		ids = append(ids, k.(int64))
		return true
	})
	return ids
}

// LoseAbsent stops the handlers of tasks the database no longer gives
// this worker: those not in held that started before asked and are not
// finished (see maint.Tasks).
func (l Leases[E]) LoseAbsent(ctx context.Context, held map[int64]bool, asked time.Time) {
	l.Execs.Range(func(id int64, ex E) bool {
		x := ex.Exec()
		if !held[id] && !x.Finished.Load() && x.Started.Before(asked) {
			l.Log.WarnContext(ctx, "lease lost: stopping handler", slog.Int64("task", id))
			x.Cancel(l.Lost)
		}
		return true
	})
}
