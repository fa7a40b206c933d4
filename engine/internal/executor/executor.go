// Package executor runs one attempt of a claimed task: the execution's
// state, the handler under its timeout and a panic guard, and the
// decision that ends the attempt (completed, retry, failed, interrupted,
// lost) through package outcome. It knows nothing of workflows or of the
// public handle: the engine gives it the handler as a function.
// Running holds a process's executions and runs their handlers, one
// goroutine each.
package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine/internal/outcome"
	"github.com/cairnhq/cairn/engine/internal/timers"
	"github.com/cairnhq/cairn/store"
)

// Task is what an execution keeps of its claimed task: the fields the
// handler and the engine read, not the whole row. A parked task's
// execution stays in memory while it waits, ten thousand of them at
// once, so every field kept here costs that much again.
type Task struct {
	ID, RunID          int64
	Idx                int
	Attempt            int
	MaxAttempts        int
	RequeueOnInterrupt bool
	Workflow, Name     string
	Queue              string
	Deps, Dependents   []int
	ConcKey            *string
	TraceContext       *string
	RunInput           json.RawMessage
	DepOutputs         json.RawMessage
	Checkpoint         json.RawMessage
}

// NewTask keeps what an execution needs of the claimed row c.
func NewTask(c store.Claimed) Task {
	return Task{ID: c.ID, RunID: c.RunID, Idx: c.Idx, Attempt: c.Attempt, MaxAttempts: c.MaxAttempts,
		RequeueOnInterrupt: c.RequeueOnInterrupt, Workflow: c.Workflow, Name: c.Name, Queue: c.Queue,
		Deps: c.Deps, Dependents: c.Dependents, ConcKey: c.ConcKey, TraceContext: c.TraceContext,
		RunInput: c.RunInput, DepOutputs: c.DepOutputs, Checkpoint: c.Checkpoint}
}

// Execution is one attempt of a claimed task in this process. The engine
// embeds it in its own execution (which adds the workflow, the queue and
// the span), so that one allocation holds both.
type Execution struct {
	Task   Task
	Cancel context.CancelCauseFunc // cancels the handler's context
	// HoldsSlot is set while the execution holds one of its queue's slots.
	HoldsSlot atomic.Bool
	Signal    chan struct{} // wakes a parked handler
	Started   time.Time
	Deadline  *timers.Attempt // the attempt's timeout, paused while parked
	Finished  atomic.Bool     // the handler returned; its write is queued
	// Parked is set while the row is known to be deferred (parked by
	// DeferUntil, not resumed); Unsure marks a park or resume write whose
	// outcome is unknown (it failed): the row's state is then read.
	Parked, Unsure atomic.Bool
	// InWait is set while the task is parked in a durable wait (Sleep,
	// AwaitSignal): no handler code is in flight, so an interrupt sends
	// it back to ready whatever RequeueOnInterrupt says.
	InWait atomic.Bool
	// LastCheck is when DeferUntil last checked the task's condition
	// (UnixNano, engine clock; 0: never). It is kept in memory only: a
	// write per check would cost thousands of writes a second with many
	// parked tasks.
	LastCheck atomic.Int64
}

// Init sets up ex for an attempt of the claimed row c begun at now,
// holding a slot.
func (ex *Execution) Init(c store.Claimed, now time.Time) {
	ex.Task = NewTask(c)
	ex.Signal = make(chan struct{}, 1)
	ex.Started = now
	ex.HoldsSlot.Store(true)
}

// RowState is the state this execution's row is known to be in, or ""
// when unsure; the completion write passes it on so that the batch is
// written without reading the rows first.
func (ex *Execution) RowState() string {
	switch {
	case ex.Unsure.Load():
		return ""
	case ex.Parked.Load():
		return store.StatusDeferred
	}
	return store.StatusRunning
}

// InterruptItem applies the interrupt rule to this execution's task,
// stopped by the shutdown (see outcome.InterruptRule).
func (ex *Execution) InterruptItem(reason string) store.TransitionItem {
	return outcome.Interrupted(ex.Task.ID, ex.Task.Attempt, outcome.Interrupt{Cause: outcome.Shutdown, Reason: reason,
		InWait: ex.InWait.Load(), RequeueOnInterrupt: ex.Task.RequeueOnInterrupt})
}

// Config is what an Executor needs of the engine.
type Config struct {
	// Clock is the engine's clock (the attempt's timeout runs on it).
	Clock func() time.Time
	// Rand draws the retry backoff's jitter, in [0, 1).
	Rand func() float64
	// Lost, Shutdown and Timeout are the causes the engine cancels a
	// handler's context with when its task was taken from this worker,
	// when the shutdown stops it, and at its timeout.
	Lost, Shutdown, Timeout error
	// Permanent reports whether an error asks for no more attempts.
	Permanent func(error) bool
	// RetryAfter returns the delay an error asks for, if it does.
	RetryAfter func(error) (time.Duration, bool)
}

// Executor runs attempts. It holds no state of its own: one serves every
// execution of an engine.
type Executor struct{ cfg Config }

// New returns an executor.
func New(cfg Config) *Executor { return &Executor{cfg: cfg} }

// Attempt is what one attempt runs. Its functions are called only while
// Run runs.
type Attempt struct {
	// Timeout is the attempt's budget; it does not run while the task is
	// parked (see Execution.Deadline).
	Timeout time.Duration
	// Handle calls the handler.
	Handle func(ctx context.Context) error
	// Output is what the handler set as the task's output.
	Output func() json.RawMessage
	// Detail is the attempt's detail (its log lines; stack: a panic's).
	Detail func(stack []byte) json.RawMessage
	// Retry is the task's retry policy, asked for on a failure only.
	Retry func() outcome.Policy
}

// Run runs one attempt of ex's task: the handler under ctx (the
// attempt's own context, which ex.Cancel cancels) with its timeout, and
// returns the item to write (the zero item: the task is no longer this
// worker's, nothing to write) and the cause ctx ended with, if it did.
func (x *Executor) Run(ctx context.Context, ex *Execution, a Attempt) (store.TransitionItem, error) {
	// The attempt's timeout does not run while the task is deferred. It
	// cancels the handler's own context (one context per parked task).
	ex.Deadline = timers.NewAttempt(a.Timeout, x.cfg.Clock, func() { ex.Cancel(x.cfg.Timeout) })
	defer ex.Deadline.Stop()
	err, stack := RunSafely(ctx, a.Handle)
	cause := context.Cause(ctx)
	switch {
	case err == nil:
		return outcome.Completed(ex.Task.ID, ex.Task.Attempt, a.Output(), a.Detail(nil)), cause
	case errors.Is(cause, x.cfg.Lost):
		// Cancelled or rescued elsewhere: the row is no longer ours.
		return outcome.Lost(), cause
	case errors.Is(cause, x.cfg.Shutdown):
		item := ex.InterruptItem("interrupted by shutdown")
		item.Detail = a.Detail(nil)
		return item, cause
	case errors.Is(cause, x.cfg.Timeout) && ctx.Err() != nil:
		return x.Fail(ex, fmt.Errorf("timeout after %s: %w", a.Timeout, err), a.Retry(), a.Detail(nil)), cause
	}
	return x.Fail(ex, err, a.Retry(), a.Detail(stack)), cause
}

// Fail applies the retry rule to a failed attempt of ex's task (see
// outcome.RetryRule): retry or failure, with detail.
func (x *Executor) Fail(ex *Execution, err error, p outcome.Policy, detail json.RawMessage) store.TransitionItem {
	f := outcome.Failure{Attempt: ex.Task.Attempt, MaxAttempts: ex.Task.MaxAttempts, Err: err,
		Permanent: x.cfg.Permanent(err), RetryAfter: x.cfg.RetryAfter}
	return outcome.AfterFailure(ex.Task.ID, f, p, x.cfg.Rand, err.Error(), detail)
}

// RunSafely calls fn, turning a panic into an error with its stack.
func RunSafely(ctx context.Context, fn func(context.Context) error) (err error, stack []byte) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
			stack = debug.Stack()
		}
	}()
	return fn(ctx), nil
}
