package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairnhq/cairn/engine/internal/notify"
	"github.com/cairnhq/cairn/store"
)

// waitRecheck is how often WaitRun reads a run it was not woken for, when
// the engine listens: a safety net for a notification lost while the
// listener reconnected (a reconnect also wakes every wait). Without a
// listener it reads every PollInterval.
const waitRecheck = 10 * time.Second

// RunResult is a run that has ended, as WaitRun returns it.
type RunResult struct {
	ID       int64
	Workflow string
	// Status is completed, failed, cancelled or interrupted (a task is
	// parked until an admin requeues it; the run may go on after that).
	Status     string
	CreatedAt  time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
	// Tasks are the run's tasks in definition order.
	Tasks []TaskResult
}

// TaskResult is one task of an ended run.
type TaskResult struct {
	Name    string
	Status  string
	Attempt int
	// Output is what the task stored with SetOutput (nil when none).
	Output json.RawMessage
	// Error is the last attempt's error ("" when none).
	Error string
}

// RunError is RunResult.Err for a run that did not complete.
type RunError struct {
	RunID  int64
	Status string
	// Errors are the last errors of the tasks that have one, by task name.
	Errors map[string]string
}

func (e *RunError) Error() string {
	msg := fmt.Sprintf("run %d %s", e.RunID, e.Status)
	names := make([]string, 0, len(e.Errors))
	for name := range e.Errors {
		names = append(names, name)
	}
	if len(names) == 0 {
		return msg
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + ": " + e.Errors[name]
	}
	return msg + ": " + strings.Join(parts, "; ")
}

// Err returns nil for a completed run, else a *RunError naming its status
// and its tasks' errors.
func (r *RunResult) Err() error {
	if r.Status == store.RunCompleted {
		return nil
	}
	re := &RunError{RunID: r.ID, Status: r.Status, Errors: map[string]string{}}
	for _, t := range r.Tasks {
		if t.Error != "" && t.Status != store.StatusCompleted {
			re.Errors[t.Name] = t.Error
		}
	}
	return re
}

// Output decodes the output of the task called name into v. It returns
// ErrNotFound when the run has no such task or the task stored no output.
func (r *RunResult) Output(name string, v any) error {
	for _, t := range r.Tasks {
		if t.Name != name {
			continue
		}
		if t.Output == nil {
			return fmt.Errorf("run %d: task %q stored no output: %w", r.ID, name, ErrNotFound)
		}
		if err := json.Unmarshal(t.Output, v); err != nil {
			return fmt.Errorf("run %d: decode the output of task %q: %w", r.ID, name, err)
		}
		return nil
	}
	return fmt.Errorf("run %d has no task %q: %w", r.ID, name, ErrNotFound)
}

// WaitRun waits until the run ends (completed, failed, cancelled, or
// interrupted: parked until an admin requeues it) and returns it with its
// tasks' outputs and errors; r.Err() says whether it completed. It is
// woken by the database's notification of the run's end, so it needs an
// engine started with a DatabaseURL to return at once (any engine: one
// with NoWorker, in another process than the workers, will do); without
// one it reads the run every PollInterval. It returns ctx's error when ctx
// ends first, and ErrNotFound for an unknown run.
func (e *Engine) WaitRun(ctx context.Context, runID int64) (*RunResult, error) {
	var r *store.Run
	err := e.hub.WaitRun(ctx, notify.RunWait{ID: runID, Poll: e.cfg.PollInterval, Recheck: waitRecheck,
		Ended: func(ctx context.Context) (ended bool, err error) {
			r, err = e.st.RunGet(ctx, runID)
			return err == nil && runEnded(r.Status), err
		},
		Mark: func(ctx context.Context) error { return e.st.RunAwait(ctx, runID) }})
	switch {
	case err != nil && err == ctx.Err():
		return nil, err
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("wait for run %d: %w", runID, ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("wait for run %d: %w", runID, err)
	}
	return e.runResult(ctx, r)
}

// runEnded reports whether WaitRun returns for a run in status s.
func runEnded(s string) bool { return store.RunIsFinished(s) || s == store.RunInterrupted }

func (e *Engine) runResult(ctx context.Context, r *store.Run) (*RunResult, error) {
	tasks, err := e.st.TaskListByRun(ctx, r.ID)
	if err != nil {
		return nil, fmt.Errorf("read the tasks of run %d: %w", r.ID, err)
	}
	out := &RunResult{ID: r.ID, Workflow: r.Workflow, Status: r.Status, CreatedAt: r.CreatedAt,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, Tasks: make([]TaskResult, len(tasks))}
	for i, t := range tasks {
		out.Tasks[i] = TaskResult{Name: t.Name, Status: t.Status, Attempt: t.Attempt, Output: t.Output}
		if t.LastError != nil {
			out.Tasks[i].Error = *t.LastError
		}
	}
	return out, nil
}
