package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cairnhq/cairn/store"
)

var liveStates = []string{store.StatusNotStarted, store.StatusReady, store.StatusRunning, store.StatusDeferred, store.StatusInterrupted}

// CancelRun cancels every task of the run that has not finished; running
// handlers (in any process) see their context cancelled.
func (e *Engine) CancelRun(ctx context.Context, runID int64) error {
	if _, err := e.st.RunGet(ctx, runID); err != nil {
		return e.mapErr(fmt.Sprintf("run %d", runID), err)
	}
	tasks, err := e.st.TaskListByStatus(ctx, runID, liveStates)
	if err != nil {
		return err
	}
	ids := make([]int64, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	return e.cancelTasks(ctx, ids, "run cancelled")
}

// CancelTask cancels one task that has not finished.
func (e *Engine) CancelTask(ctx context.Context, taskID int64) error {
	t, err := e.st.TaskGet(ctx, taskID)
	if err != nil {
		return e.mapErr(fmt.Sprintf("task %d", taskID), err)
	}
	if store.IsDone(t.Status) {
		return fmt.Errorf("%w: task %d is %s", ErrInvalidState, taskID, t.Status)
	}
	return e.cancelTasks(ctx, []int64{taskID}, "task cancelled")
}

func (e *Engine) cancelTasks(ctx context.Context, ids []int64, reason string) error {
	if len(ids) == 0 {
		return nil
	}
	detail, _ := json.Marshal(map[string]string{"reason": reason})
	items := make([]store.TransitionItem, len(ids))
	for i, id := range ids {
		items[i] = store.TransitionItem{TaskID: id, To: store.StatusCancelled, Detail: detail}
	}
	moved, err := e.st.Transition(ctx, store.TransitionParams{From: liveStates, Items: items}, evaluate)
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	for _, m := range moved {
		e.loseTask(m.TaskID) // local handlers at once; others via NOTIFY
	}
	return nil
}

// PauseRun stops new claims of the run's tasks; running ones go on.
func (e *Engine) PauseRun(ctx context.Context, runID int64) error {
	return e.mapErr(fmt.Sprintf("run %d", runID), e.st.RunSetPaused(ctx, runID, true))
}

// ResumeRun lets a paused run's tasks be claimed again.
func (e *Engine) ResumeRun(ctx context.Context, runID int64) error {
	return e.mapErr(fmt.Sprintf("run %d", runID), e.st.RunSetPaused(ctx, runID, false))
}

// RetryTask sends a failed (or cancelled) task back to ready with at least
// one more attempt; dependents skipped because of it wait for it again.
func (e *Engine) RetryTask(ctx context.Context, taskID int64) error {
	return e.reopen(ctx, taskID, []string{store.StatusFailed, store.StatusCancelled})
}

// RequeueTask sends an interrupted task back to ready.
func (e *Engine) RequeueTask(ctx context.Context, taskID int64) error {
	return e.reopen(ctx, taskID, []string{store.StatusInterrupted})
}

func (e *Engine) reopen(ctx context.Context, taskID int64, from []string) error {
	moved, err := e.st.TaskReopen(ctx, taskID, from, evaluate)
	if err != nil {
		return e.mapErr(fmt.Sprintf("task %d", taskID), err)
	}
	if !moved {
		t, err := e.st.TaskGet(ctx, taskID)
		if err != nil {
			return e.mapErr(fmt.Sprintf("task %d", taskID), err)
		}
		return fmt.Errorf("%w: task %d is %s, not %v", ErrInvalidState, taskID, t.Status, from)
	}
	return nil
}

// PauseQueue stops every engine claiming from queue.
func (e *Engine) PauseQueue(ctx context.Context, queue string) error {
	if err := checkName("queue", queue); err != nil {
		return err
	}
	return e.mapErr(fmt.Sprintf("queue %q", queue), e.st.QueueSetPaused(ctx, queue, true))
}

// ResumeQueue lets engines claim from queue again.
func (e *Engine) ResumeQueue(ctx context.Context, queue string) error {
	if err := checkName("queue", queue); err != nil {
		return err
	}
	return e.mapErr(fmt.Sprintf("queue %q", queue), e.st.QueueSetPaused(ctx, queue, false))
}

// SetQueueCap sets the cluster-wide cap on the queue's running tasks
// (nil removes it).
func (e *Engine) SetQueueCap(ctx context.Context, queue string, maxRunning *int) error {
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
	payload, _ := json.Marshal(map[string]any{"k": "signal", "t": []int64{taskID}})
	return e.st.Notify(ctx, e.st.ControlChannel(), string(payload))
}

func (e *Engine) signalLocal(taskID int64) {
	if v, ok := e.execs.Load(taskID); ok {
		select {
		case v.(*execution).signal <- struct{}{}:
		default:
		}
	}
}

// loseTask cancels the local handler of a task taken from this worker.
func (e *Engine) loseTask(taskID int64) {
	if v, ok := e.execs.Load(taskID); ok {
		v.(*execution).cancel(ErrTaskLost)
	}
}

// mapErr turns store errors into the engine's typed errors.
func (e *Engine) mapErr(what string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	if errors.Is(err, store.ErrInvalidValue) {
		return fmt.Errorf("%s: %w: %w", what, ErrInvalidInput, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
