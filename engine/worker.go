package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/engine/internal/completer"
	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/engine/internal/journal"
	"github.com/cairnhq/cairn/engine/internal/maint"
	"github.com/cairnhq/cairn/engine/internal/parker"
	"github.com/cairnhq/cairn/engine/internal/producer"
	"github.com/cairnhq/cairn/engine/internal/tasklog"
	"github.com/cairnhq/cairn/engine/internal/telemetry"
	"github.com/cairnhq/cairn/engine/internal/timers"
	"github.com/cairnhq/cairn/store"
)

// worker is this process's worker (empty with NoWorker): its queues,
// the executions of the tasks it claimed, and the writers of their
// outcomes.
type worker struct {
	workerID  atomic.Int64 // the worker row (0 before Start or with NoWorker)
	queues    producer.Queues[*execution]
	running   executor.Running[*execution] // the executions and their handler goroutines
	executor  *executor.Executor
	completer *completer.Completer[*execution, writePlan]
	parker    *parker.Parker[*execution] // the parks and resumes of DeferUntil and the waits
	steps     *journal.Writer            // journals handlers' steps in batches
	wakeups   *timers.Wakeups            // interval wake-ups of parked tasks
	taskLogs  *tasklog.Writer            // writes handlers' log lines live (nil without a worker)
}

// newProducer returns the producer of queue q (see producer.Producer):
// its claim loops start an execution for each row they claim.
func (e *Engine) newProducer(q *queueRunner) *producer.Producer[*execution] {
	return producer.New(producer.Config[*execution]{Store: e.st, Queues: e.queues, Queue: q, WorkerID: e.workerID.Load(),
		Lease: e.cfg.LeaseDuration, Poll: e.cfg.PollInterval, Keyed: &e.keyed, Clock: e.cfg.Clock, Health: e.health,
		Start:   func(c store.Claimed) { e.startExecution(q, c) },
		OnClaim: e.tr.ClaimBatch,
		OnClaimed: func(start time.Time, n int) {
			telemetry.ClaimLatency.Observe(e.cfg.Clock().Sub(start).Seconds())
			telemetry.CountTransition(store.StatusReady, store.StatusRunning, n)
		}})
}

// queueRunner is a queue of this engine (see producer.Queue).
type queueRunner = producer.Queue[*execution]

// execution is one attempt of a claimed task in this process: the
// executor's state (see executor.Execution) and what the engine adds.
type execution struct {
	executor.Execution
	e    *Engine
	q    *queueRunner
	spec *Task
	span trace.Span // the attempt's span; nil when tracing is off
}

// checked records a check of the task's DeferUntil condition, now.
func (ex *execution) checked() { ex.LastCheck.Store(ex.e.cfg.Clock().UnixNano()) }

// settled records the failure of a park or resume write: a
// lost row is no longer this attempt's; any other error leaves the row's
// state unknown.
func (ex *execution) settled(err error) {
	if !errors.Is(err, ErrTaskLost) || errors.Is(err, errEngineStopped) {
		ex.Unsure.Store(true)
	}
}

// newExecutor returns the engine's executor (see executor.Executor).
func newExecutor(clock func() time.Time) *executor.Executor {
	return executor.New(executor.Config{Clock: clock, Rand: rand.Float64,
		Lost: ErrTaskLost, Shutdown: errShutdownCancel, Timeout: errTimeout,
		Permanent:  func(err error) bool { _, ok := errors.AsType[*permanentError](err); return ok },
		RetryAfter: retryAfterOf})
}

// startExecution runs an execution of the claimed row c, which holds
// one of q's slots, in a goroutine of its own (see executor.Running).
func (e *Engine) startExecution(q *queueRunner, c store.Claimed) {
	ex := &execution{e: e, q: q}
	ex.Init(c, e.cfg.Clock())
	// By name: the claim took only a version this worker serves (see
	// Workflow.Version), and a run of a Compatible version, or from before
	// versions, may have another shape.
	if def, ok := e.workflow(c.Workflow); ok {
		if i, ok := def.byName[c.Name]; ok {
			ex.spec = &def.wf.Tasks[i]
		}
	}
	e.running.Go(ex)
}

// execute runs the attempt (see executor.Executor.Run) and submits its
// outcome to the completer.
func (e *Engine) execute(ctx context.Context, ex *execution) {
	defer ex.Cancel(nil)
	ctx = e.tr.attempt(ctx, ex)
	if ex.spec == nil || ex.spec.Name != ex.Task.Name {
		err := fmt.Errorf("workflow %q task %q is not registered in this process", ex.Task.Workflow, ex.Task.Name)
		e.submit(ex, e.executor.Fail(&ex.Execution, err, RetryPolicy{}.outcome(), nil))
		return
	}
	timeout := ex.spec.Timeout
	if timeout == 0 {
		timeout = e.cfg.TaskTimeout
	}
	h := newHandle(ex, ctx)
	run, retry := ex.spec.Run, ex.spec.Retry
	item, cause := e.executor.Run(ctx, &ex.Execution, executor.Attempt{Timeout: timeout,
		Handle: func(ctx context.Context) error { return run(ctx, h) },
		Output: func() json.RawMessage { return h.output },
		Detail: h.detail,
		Retry:  retry.outcome})
	outcome := telemetry.AttemptOutcome(item, errors.Is(cause, errLeaseLost), errors.Is(cause, errShutdownCancel))
	telemetry.TaskDuration.WithLabelValues(ex.Task.Workflow, ex.Task.Name, outcome).Observe(e.cfg.Clock().Sub(ex.Started).Seconds())
	e.submit(ex, item)
}

// retryAfterOf returns the delay err asks for with RetryAfter, if it does.
func retryAfterOf(err error) (time.Duration, bool) {
	ra, ok := errors.AsType[*retryAfterError](err)
	if !ok {
		return 0, false
	}
	return ra.after, true
}

// completion is a finished attempt queued for the completer.
type completion = completer.Completion[*execution]

// Exec returns the executor's part of ex (see completer.Exec), Queue
// the queue whose slot it holds.
func (ex *execution) Exec() *executor.Execution { return &ex.Execution }
func (ex *execution) Queue() *queueRunner       { return ex.q }

// newCompleter returns the engine's completer (see completer.Completer),
// with the queues as its producer (see producer.Along): they start the
// rows claimed along and forget the executions written.
func newCompleter(e *Engine) *completer.Completer[*execution, writePlan] {
	side := producer.NewAlong(producer.AlongConfig[*execution]{Queues: e.queues, WorkerID: e.workerID.Load(),
		Lease: e.cfg.LeaseDuration, Keyed: &e.keyed, Start: e.startExecution, Forget: e.running.Delete, Lost: ErrTaskLost})
	return completer.New(completer.Config[*execution, writePlan]{Store: e.st, Producer: side,
		WorkerID: e.workerID.Load(), Lease: e.cfg.LeaseDuration, Max: e.cfg.CompletionBatch, Held: e.queues.Held,
		Clock: e.cfg.Clock, Health: e.health,
		OnWrite: e.tr.completeBatch,
		OnCommit: func(start time.Time, moved, released []store.Moved, claimed int) {
			telemetry.CountMoves(moved, released)
			if claimed >= 0 {
				telemetry.ClaimLatency.Observe(e.cfg.Clock().Sub(start).Seconds())
				telemetry.CountTransition(store.StatusReady, store.StatusRunning, claimed)
			}
		}})
}

// submit hands a finished attempt to the completer.
func (e *Engine) submit(ex *execution, item store.TransitionItem) {
	ex.Finished.Store(true)
	e.tr.attemptDone(ex, item)
	if err := e.completer.Submit(completion{Ex: ex, Item: pgSafeItem(item)}); err != nil {
		// The engine closes the completer after every handler returned:
		// this is a defect. The task's lease runs out and the rescuer
		// takes it over.
		e.cfg.Logger.Error("finished attempt after the completer stopped", slog.Int64("task", ex.Task.ID), slog.Any("error", err))
	}
}

// writePlan is what the queues keep of a completion write (see producer.Along).
type writePlan = producer.WritePlan[*execution]

// errLeaseLost is the cause given to a handler whose task the heartbeat
// found no longer held by this worker.
var errLeaseLost = fmt.Errorf("%w: lease lost", ErrTaskLost)

// newHeartbeat returns the worker's heartbeat service (see
// maint.Heartbeat). It first retries a failed write of the worker's
// handles (see routing.Router), and sets the slot gauges after each beat.
func (e *Engine) newHeartbeat() *maint.Heartbeat {
	return maint.NewHeartbeat(maint.HeartbeatConfig{Store: e.st, WorkerID: e.workerID.Load(),
		Tasks:    executor.Leases[*execution]{Execs: &e.running, Log: e.cfg.Logger, Lost: errLeaseLost},
		Interval: e.cfg.HeartbeatInterval, Lease: e.cfg.LeaseDuration, Clock: e.cfg.Clock, Logger: e.cfg.Logger, Health: e.health,
		Before: e.router.RetryFailed, OnMoves: telemetry.CountMoves,
		After: func() {
			for name, q := range e.queues {
				telemetry.SlotsTotal.WithLabelValues(name).Set(float64(q.Size))
				telemetry.SlotsInUse.WithLabelValues(name).Set(float64(q.Size - q.Slots.Available()))
			}
		}})
}
