package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/engine/internal/completer"
	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/engine/internal/producer"
	"github.com/cairnhq/cairn/engine/internal/slots"
	"github.com/cairnhq/cairn/store"
)

// newProducer returns the producer of queue q (see producer.Producer):
// its claim loops start an execution for each row they claim.
func (e *Engine) newProducer(q *queueRunner) *producer.Producer[*execution] {
	return producer.New(producer.Config[*execution]{Store: e.st, Queues: e.queues, Queue: q, WorkerID: e.workerID,
		Lease: e.cfg.LeaseDuration, Poll: e.cfg.PollInterval, Keyed: &e.keyed, Clock: e.cfg.Clock, Health: e.health,
		Start:   func(c store.Claimed) { e.startExecution(q, c) },
		OnClaim: e.tr.claimBatch,
		OnClaimed: func(start time.Time, n int) {
			claimLatency.Observe(e.cfg.Clock().Sub(start).Seconds())
			countTransition(store.StatusReady, store.StatusRunning, n)
		}})
}

// refreshCap reads whether queue q has a cap (see producer.RefreshCap).
func (e *Engine) refreshCap(ctx context.Context, q *queueRunner) {
	producer.RefreshCap(ctx, e.st, e.health, q)
}

// queueRunner is a queue of this engine (see producer.Queue).
type queueRunner = producer.Queue[*execution]

// claimParams asks for limits[i] tasks of queues[i], keyed (with each
// queue's turn) when a registered task has a flow limit.
func (e *Engine) claimParams(queues []*queueRunner, limits []int) store.ClaimParams {
	return e.queues.ClaimParams(e.workerID, e.cfg.LeaseDuration, e.keyed.Load(), queues, limits)
}

// execution is one attempt of a claimed task in this process: the
// executor's state (see executor.Execution) and what the engine adds.
type execution struct {
	executor.Execution
	e    *Engine
	q    *queueRunner
	def  *workflowDef
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
		Permanent: func(err error) bool {
			var perm *permanentError
			return errors.As(err, &perm)
		},
		RetryAfter: retryAfterOf})
}

func (e *Engine) startExecution(q *queueRunner, c store.Claimed) {
	ex := &execution{e: e, q: q}
	ex.Init(c, e.cfg.Clock())
	if def, ok := e.workflow(c.Workflow); ok {
		ex.def = def
		ex.spec, _ = def.task(c.Idx)
		if i, ok := def.byName[c.Name]; ok && (ex.spec == nil || ex.spec.Name != c.Name) {
			// A run of another shape of the workflow (another build, in a
			// rolling deploy): the task is routed here by name.
			ex.spec, _ = def.task(i)
		}
	}
	ctx, cancel := context.WithCancelCause(e.handlerCtx)
	ex.Cancel = cancel
	e.execs.Store(c.ID, ex)
	e.handlers.Add(1)
	go func() {
		defer e.handlers.Done()
		e.execute(ctx, ex)
	}()
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
	taskDuration.WithLabelValues(ex.Task.Workflow, ex.Task.Name, attemptOutcome(item, cause)).Observe(e.cfg.Clock().Sub(ex.Started).Seconds())
	e.submit(ex, item)
}

// retryAfterOf returns the delay err asks for with RetryAfter, if it does.
func retryAfterOf(err error) (time.Duration, bool) {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.after, true
	}
	return 0, false
}

// completion is a finished attempt queued for the completer.
type completion = completer.Completion[*execution]

// Exec returns the executor's part of ex (see completer.Exec).
func (ex *execution) Exec() *executor.Execution { return &ex.Execution }

// newCompleter returns the engine's completer (see completer.Completer),
// with the queues as its producer (see completionSide).
func newCompleter(e *Engine) *completer.Completer[*execution, writePlan] {
	return completer.New(completer.Config[*execution, writePlan]{Store: e.st, Producer: completionSide{e},
		WorkerID: e.workerID, Lease: e.cfg.LeaseDuration, Max: e.cfg.CompletionBatch, Held: e.slotsHeld,
		Clock: e.cfg.Clock, Health: e.health,
		OnWrite: e.tr.completeBatch,
		OnCommit: func(start time.Time, moved, released []store.Moved, claimed int) {
			countMoves(moved, released)
			if claimed >= 0 {
				claimLatency.Observe(e.cfg.Clock().Sub(start).Seconds())
				countTransition(store.StatusReady, store.StatusRunning, claimed)
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
		e.log.Error("finished attempt after the completer stopped", slog.Int64("task", ex.Task.ID), slog.Any("error", err))
	}
}

// slotsHeld counts the slots held across queues: handlers running plus
// finished ones whose write has not committed.
func (e *Engine) slotsHeld() int {
	n := 0
	for _, q := range e.queues {
		n += q.Size - q.Slots.Available()
	}
	return n
}

// writePlan is what the queues keep of one completion write, from its
// plan to its commit (see completionSide).
type writePlan struct {
	freed  map[*queueRunner]int
	handed map[*queueRunner][]*slots.Waiter[*execution]
	ask    claimAsk
	// quietSince[q]: q's freed slots are released without waking a claim
	// loop if its pokes count is still this (see Written).
	quietSince map[*queueRunner]uint64
}

type along = completer.Along[*execution, writePlan]

// completionSide is the queues' side of a completion write (see
// completer.Producer): the slots a batch frees go first to deferred tasks
// waiting for one (FIFO), whose rows the write moves deferred -> running
// (see slots.Waiter), so a deferred task comes back without a write of
// its own; the write claims the next tasks for the others.
type completionSide struct{ e *Engine }

func (s completionSide) Plan(batch []completion, releases bool, a *along) {
	// The batch's slots are the completer's from here: a park write that
	// commits meanwhile (a handler that gave up waiting for it) must not
	// release them as well.
	freed := map[*queueRunner]int{}
	for _, b := range batch {
		if b.Ex.HoldsSlot.Swap(false) {
			freed[b.Ex.q]++
		}
	}
	// Deferred tasks waiting for a slot come first: the write moves their
	// rows deferred -> running.
	handed := map[*queueRunner][]*slots.Waiter[*execution]{}
	for q, n := range freed {
		if ws := q.Slots.HandOff(n); len(ws) > 0 {
			handed[q] = ws
			freed[q] -= len(ws)
			for _, w := range ws {
				a.Resume = append(a.Resume, w.Item)
			}
		}
	}
	// Where nobody waits for the slots left, the write claims their next
	// tasks in its own transaction: one commit finishes a batch and starts
	// the next, and the database never shows more running tasks than
	// slots, as the finished rows leave running in the same transaction.
	ask := s.e.claimAlong(freed, releases)
	a.Total = ask.total
	a.State = writePlan{freed: freed, handed: handed, ask: ask, quietSince: ask.drained}
}

func (s completionSide) ClaimParams(a *along) store.ClaimParams {
	return s.e.claimParams(a.State.ask.begun, a.State.ask.limits)
}

func (s completionSide) ClaimFailed(a *along, p store.ClaimParams, err error) {
	s.e.queues.AfterClaim(p, nil, err)
	for _, q := range a.State.ask.begun {
		q.EndClaim()
	}
	a.State.ask = claimAsk{}
}

func (s completionSide) Written(batch []completion, a *along, claim store.ClaimParams, claimed []store.Claimed, resumed map[int64]bool) {
	e := s.e
	st := &a.State
	ask, freed, quietSince := st.ask, st.freed, st.quietSince
	for _, b := range batch {
		e.execs.Delete(b.Ex.Task.ID)
	}
	// Hand the slots on; the claimed tasks take over others; the rest are
	// released per queue in one go, so the claim loop wakes once and
	// claims a batch as large as what is left.
	for _, ws := range st.handed {
		for _, w := range ws {
			w.Item.HoldsSlot.Store(true)
			var err error
			if !resumed[w.Item.Task.ID] {
				err = ErrTaskLost
			}
			w.Done(err)
		}
	}
	byQueue := map[string]*queueRunner{}
	for q := range freed {
		byQueue[q.Name] = q
	}
	e.queues.AfterClaim(claim, claimed, nil)
	for _, t := range claimed {
		q := byQueue[t.Queue]
		freed[q]--
		e.startExecution(q, t)
	}
	// A queue claimed along for took every ready task the write could
	// see, up to what it asked (a keyed claim takes a share per key and
	// may leave more): one that got fewer is empty.
	if len(ask.begun) > 0 && !claim.Keyed {
		for _, q := range ask.begun {
			q.ClaimEnded(ask.before[q], freed[q] > 0)
			if freed[q] > 0 {
				quietSince[q] = ask.before[q]
			}
		}
	}
	for q, n := range freed {
		if since, ok := quietSince[q]; ok && n > 0 && q.Pokes.Load() == since {
			// The queue was found empty (by this write's claim or one
			// before it) and nothing announced work since: a claim loop
			// woken now would find nothing either.
			q.Slots.ReleaseQuiet(n)
			continue
		}
		q.Slots.Release(n)
	}
	for _, q := range ask.begun {
		q.EndClaim()
	}
}

// claimAsk is what a completion write claims along: queue names and how
// many tasks of each.
type claimAsk struct {
	names  []string
	limits []int
	total  int
	begun  []*queueRunner // beginClaim succeeded: end each with claiming.Done
	// before is each begun queue's pokes count as the ask was made;
	// drained are the queues not asked because their last claim found
	// them empty, with the pokes count that claim began at.
	before, drained map[*queueRunner]uint64
}

// claimAlong decides how many tasks the completion write that frees
// freed slots claims in its transaction: a queue's freed slots, unless
// the queue stops claiming, is capped (its cap is counted under a lock
// by the claim loop), or has deferred tasks waiting for a slot (they come
// first). Nor, unless the write releases dependents (which it could
// claim), does it claim for a queue whose last claim found it empty with
// nothing announced since.
func (e *Engine) claimAlong(freed map[*queueRunner]int, releases bool) claimAsk {
	ask := claimAsk{before: map[*queueRunner]uint64{}, drained: map[*queueRunner]uint64{}}
	for q, n := range freed {
		if n <= 0 || q.Capped.Load() || q.Slots.Waiting() > 0 {
			continue
		}
		if since, ok := q.IsDrained(); ok && !releases {
			ask.drained[q] = since
			continue
		}
		if !q.BeginClaim() {
			continue
		}
		ask.begun = append(ask.begun, q)
		ask.before[q] = q.Pokes.Load()
		ask.names = append(ask.names, q.Name)
		ask.limits = append(ask.limits, n)
		ask.total += n
	}
	return ask
}
