package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/engine/internal/rerun"
	"github.com/cairnhq/cairn/engine/internal/telemetry"
	"github.com/cairnhq/cairn/store"
)

var liveStates = []string{store.StatusNotStarted, store.StatusReady, store.StatusRunning, store.StatusDeferred, store.StatusInterrupted}

// CancelRun cancels every task of the run that has not finished; running
// handlers (in any process) see their context cancelled. A finished run
// (completed, failed or cancelled) is refused with ErrInvalidState.
func (e *Engine) CancelRun(ctx context.Context, runID int64) (err error) {
	defer e.audit(ctx, &err, "cancel_run", slog.Int64("run", runID))
	tasks, err := e.st.TaskListByStatus(ctx, runID, liveStates)
	if err != nil {
		return e.mapErr(fmt.Sprintf("run %d", runID), err)
	}
	ids := make([]int64, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	if moved, err := e.cancelTree(ctx, ids, "run cancelled"); err != nil || len(moved) > 0 {
		return err
	}
	// Nothing moved (each task's compare-and-set is the check): say why.
	run, err := e.st.RunGet(ctx, runID)
	if err != nil {
		return e.mapErr(fmt.Sprintf("run %d", runID), err)
	}
	if store.RunIsFinished(run.Status) {
		return runFinished(runID, run.Status, "cancelled")
	}
	return nil
}

// runFinished is the error of an action refused on a finished run.
func runFinished(runID int64, status, done string) error {
	return fmt.Errorf("%w: run %d is %s; only an unfinished run can be %s", ErrInvalidState, runID, status, done)
}

// CancelTask cancels one task that has not finished.
func (e *Engine) CancelTask(ctx context.Context, taskID int64) (err error) {
	defer e.audit(ctx, &err, "cancel_task", slog.Int64("task", taskID))
	if moved, err := e.cancelTree(ctx, []int64{taskID}, "task cancelled"); err != nil || len(moved) > 0 {
		return err
	}
	t, err := e.st.TaskGet(ctx, taskID)
	if err != nil {
		return e.mapErr(fmt.Sprintf("task %d", taskID), err)
	}
	return fmt.Errorf("%w: task %d is %s; only an unfinished task can be cancelled", ErrInvalidState, taskID, t.Status)
}

// cancelTree cancels those of ids that have not finished and, in the same
// transaction, the unfinished runs they spawned, down the tree (DESIGN:
// cancelling a parent cancels its unfinished children). It returns the
// ids among ids it cancelled.
func (e *Engine) cancelTree(ctx context.Context, ids []int64, reason string) ([]int64, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	moved, released, err := e.st.TaskCancelTree(ctx, ids, actionDetail(ctx, reason), actionDetail(ctx, "parent cancelled"))
	if err != nil {
		return nil, fmt.Errorf("cancel: %w", err)
	}
	telemetry.CountMoves(moved, released)
	asked := make(map[int64]bool, len(ids))
	for _, id := range ids {
		asked[id] = true
	}
	var out []int64
	for _, m := range moved {
		e.loseTask(m.TaskID, m.Attempt) // local handlers at once; others via NOTIFY
		if asked[m.TaskID] {
			out = append(out, m.TaskID)
		}
	}
	return out, nil
}

// PauseRun stops new claims of the run's tasks; running ones go on.
// Pausing a paused run changes nothing and succeeds; a finished run is
// refused with ErrInvalidState.
func (e *Engine) PauseRun(ctx context.Context, runID int64) (err error) {
	defer e.audit(ctx, &err, "pause_run", slog.Int64("run", runID))
	return e.setRunPaused(ctx, runID, true, "paused")
}

// ResumeRun lets a paused run's tasks be claimed again. Resuming a run
// that is not paused changes nothing and succeeds; a finished run is
// refused with ErrInvalidState.
func (e *Engine) ResumeRun(ctx context.Context, runID int64) (err error) {
	defer e.audit(ctx, &err, "resume_run", slog.Int64("run", runID))
	return e.setRunPaused(ctx, runID, false, "resumed")
}

func (e *Engine) setRunPaused(ctx context.Context, runID int64, paused bool, done string) error {
	status, changed, err := e.st.RunSetPaused(ctx, runID, paused)
	if err != nil {
		return e.mapErr(fmt.Sprintf("run %d", runID), err)
	}
	if !changed {
		return runFinished(runID, status, done)
	}
	if !paused {
		// The run's ready tasks may lie below the claim floors: this
		// engine's claims start at the start again (others find them at
		// their next floor refresh).
		for _, q := range e.queues {
			q.Floor.Reset()
			q.KeyedFloor.Reset()
			q.Poke()
		}
	}
	return nil
}

// RetryTask sends a failed (or cancelled) task back to ready with at least
// one more attempt; dependents skipped because of it wait for it again.
func (e *Engine) RetryTask(ctx context.Context, taskID int64) (err error) {
	defer e.audit(ctx, &err, "retry_task", slog.Int64("task", taskID))
	return e.reopen(ctx, taskID, []string{store.StatusFailed, store.StatusCancelled}, "task retried", "only a failed or cancelled task can be retried")
}

// RequeueTask sends an interrupted task back to ready.
func (e *Engine) RequeueTask(ctx context.Context, taskID int64) (err error) {
	defer e.audit(ctx, &err, "requeue_task", slog.Int64("task", taskID))
	return e.reopen(ctx, taskID, []string{store.StatusInterrupted}, "task requeued", "only an interrupted task can be requeued")
}

// reopen sends a task in one of the states from back to ready, recording
// reason; refused explains the refusal when it is in another.
func (e *Engine) reopen(ctx context.Context, taskID int64, from []string, reason, refused string) error {
	moved, err := e.st.TaskReopen(ctx, &store.TaskReopenParams{TaskID: taskID, From: from, Detail: actionDetail(ctx, reason)})
	if err != nil {
		return e.mapErr(fmt.Sprintf("task %d", taskID), err)
	}
	telemetry.CountMoves(moved)
	if len(moved) == 0 {
		t, err := e.st.TaskGet(ctx, taskID)
		if err != nil {
			return e.mapErr(fmt.Sprintf("task %d", taskID), err)
		}
		return fmt.Errorf("%w: task %d is %s; %s", ErrInvalidState, taskID, t.Status, refused)
	}
	return nil
}

// PauseQueue stops every engine claiming from queue.
func (e *Engine) PauseQueue(ctx context.Context, queue string) (err error) {
	defer e.audit(ctx, &err, "pause_queue", slog.String("queue", queue))
	if err := checkName("queue", queue); err != nil {
		return err
	}
	return e.mapErr(fmt.Sprintf("queue %q", queue), e.st.QueueSetPaused(ctx, queue, true))
}

// ResumeQueue lets engines claim from queue again.
func (e *Engine) ResumeQueue(ctx context.Context, queue string) (err error) {
	defer e.audit(ctx, &err, "resume_queue", slog.String("queue", queue))
	if err := checkName("queue", queue); err != nil {
		return err
	}
	return e.mapErr(fmt.Sprintf("queue %q", queue), e.st.QueueSetPaused(ctx, queue, false))
}

// SetQueueCap sets the cluster-wide cap on the queue's running tasks
// (nil removes it).
func (e *Engine) SetQueueCap(ctx context.Context, queue string, maxRunning *int) (err error) {
	capAttr := slog.Int("max_running", -1) // -1: no cap
	if maxRunning != nil {
		capAttr = slog.Int("max_running", *maxRunning)
	}
	defer e.audit(ctx, &err, "set_queue_cap", slog.String("queue", queue), capAttr)
	if err := checkName("queue", queue); err != nil {
		return err
	}
	if maxRunning != nil && *maxRunning < 0 {
		return fmt.Errorf("%w: max_running: cap of queue %q must not be negative", ErrInvalidInput, queue)
	}
	if maxRunning != nil {
		if err := checkInt32("max_running", *maxRunning); err != nil {
			return err
		}
	}
	return e.mapErr(fmt.Sprintf("queue %q", queue), e.st.QueueSetCap(ctx, queue, maxRunning))
}

// Signal makes a deferred task re-check its condition now, in whichever
// process holds it.
func (e *Engine) Signal(ctx context.Context, taskID int64) error {
	e.signalLocal(taskID)
	return e.st.ControlNotify(ctx, store.ControlMessage{Kind: store.ControlSignal, TaskIDs: []int64{taskID}})
}

// LastCheck returns when the DeferUntil condition of a task this process
// holds was last checked (by the engine's clock), and false when this
// process does not hold the task or its handler never checked a
// condition. Checks are not stored: another process's tasks are unknown
// here.
func (e *Engine) LastCheck(taskID int64) (time.Time, bool) {
	ex, ok := e.running.Load(taskID)
	if !ok {
		return time.Time{}, false
	}
	n := ex.LastCheck.Load()
	if n == 0 {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

func (e *Engine) signalLocal(taskID int64) {
	if ex, ok := e.running.Load(taskID); ok {
		select {
		case ex.Signal <- struct{}{}:
		default:
		}
	}
}

// loseTask cancels the local handler of the task's attempt taken from
// this worker (attempt 0: whichever runs). A later attempt runs on: this
// worker may have claimed the task again (its rescuer made it ready)
// before it heard of the take.
func (e *Engine) loseTask(taskID int64, attempt int) {
	if ex, ok := e.running.Load(taskID); ok && (attempt == 0 || ex.Task.Attempt == attempt) && !ex.Finished.Load() {
		e.cfg.Logger.Info("task taken from this worker: stopping its handler", slog.Int64("task", taskID), slog.Int("attempt", ex.Task.Attempt))
		ex.Cancel(ErrTaskLost)
	}
}

// mapErr turns store errors into the engine's typed errors (define.Rules.StoreErr).
func (e *Engine) mapErr(what string, err error) error { return rules.StoreErr(what, err) }

// RerunOption adjusts one RerunFrom.
type RerunOption = func(*rerun.Options)

// WithRerunInput gives a rerun this input (as Enqueue takes it) in place of the original run's.
func WithRerunInput(input any) RerunOption {
	return func(o *rerun.Options) { o.Input, o.HasInput = input, true }
}

// RerunFrom starts a new run of finished run runID's version (a run
// without one: as registered here) from its task named task: the tasks
// upstream of it created completed with their outputs in runID (refused
// with ErrInvalidState unless all completed), the rest as in a new run.
// ErrNotFound: no such run; ErrInvalidState: not finished; ErrInvalidInput:
// no such task. An admin action: the copied completions' events say
// "rerun from run N task X" and who asked.
func (e *Engine) RerunFrom(ctx context.Context, runID int64, task string, opts ...RerunOption) (run *Run, err error) {
	defer e.audit(ctx, &err, "rerun_from", slog.Int64("run", runID), slog.String("task", task))
	local := func(w string) (ts []store.TaskTemplate) {
		if d, ok := e.workflow(w); ok {
			ts = d.templates
		}
		return ts
	}
	id, wf, err := rerun.Rerun{St: e.st, Rules: e.inputRules(), Local: local}.From(ctx, runID, task, opts, actionDetail(ctx, fmt.Sprintf("rerun from run %d task %s", runID, task)))
	if err != nil {
		return nil, err
	}
	return &Run{ID: id, Workflow: wf}, nil
}
