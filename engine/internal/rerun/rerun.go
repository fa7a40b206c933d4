// Package rerun starts a rerun of a finished run from one of its tasks
// (Engine.RerunFrom): a new run of the run's workflow version whose tasks
// upstream of that task start completed with the outputs they had in the
// run, the rest as in a new run.
package rerun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cairnhq/cairn/engine/internal/define"
	"github.com/cairnhq/cairn/store"
)

// Options are the options of one rerun (the engine's options set them).
type Options struct {
	// Input, when HasInput, is the new run's input in place of the
	// original's.
	Input    any
	HasInput bool
}

// Rerun starts reruns.
type Rerun struct {
	St    *store.Store
	Rules define.Rules
	// Local returns the task templates of a workflow this process
	// registers (nil for one it does not): those of a run without a
	// version.
	Local func(workflow string) []store.TaskTemplate
}

// From starts a rerun of run runID from its task named task, detail the
// event detail of the completions it copies (why, who asked), and returns
// the new run's id and workflow. Refused: an unknown run (ErrNotFound), a
// run not finished, or a task upstream of task that did not complete in
// it (ErrInvalidState), an unknown task name or a bad input
// (ErrInvalidInput).
func (r Rerun) From(ctx context.Context, runID int64, task string, opts []func(*Options), detail json.RawMessage) (int64, string, error) {
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
	run, err := r.St.RunGet(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return 0, "", fmt.Errorf("rerun: run %d: %w", runID, r.Rules.ErrNotFound)
	}
	if err != nil {
		return 0, "", fmt.Errorf("rerun: run %d: %w", runID, err)
	}
	if !store.RunIsFinished(run.Status) {
		return 0, "", fmt.Errorf("%w: run %d is %s; only a finished run (completed, failed or cancelled) can be rerun", r.Rules.ErrInvalidState, runID, run.Status)
	}
	ts, err := r.templates(ctx, run)
	if err != nil {
		return 0, "", err
	}
	at, up, err := r.Rules.Upstream(run.Workflow, ts, task)
	if err != nil {
		return 0, "", fmt.Errorf("rerun run %d: %w", runID, err)
	}
	old, err := r.St.TaskListByRun(ctx, runID)
	if err != nil {
		return 0, "", err
	}
	byName := make(map[string]store.Task, len(old))
	for _, t := range old {
		byName[t.Name] = t
	}
	done := make([]store.RerunDone, 0, len(up))
	for _, i := range up {
		t, ok := byName[ts[i].Name]
		if !ok || t.Status != store.StatusCompleted {
			status := "missing"
			if ok {
				status = t.Status
			}
			return 0, "", fmt.Errorf("%w: task %q of run %d is %s; a rerun from %q needs every task upstream of it completed (rerun from an earlier task)",
				r.Rules.ErrInvalidState, ts[i].Name, runID, status, ts[at].Name)
		}
		done = append(done, store.RerunDone{Idx: i, Output: t.Output})
	}
	input := any(run.Input)
	if o.HasInput {
		input = o.Input
	}
	keyed := false
	for _, t := range ts {
		keyed = keyed || t.Concurrency != nil || t.RateLimit != nil
	}
	version := ""
	if run.Version != nil {
		version = *run.Version
	}
	p, err := r.Rules.Prepare(define.Run{Workflow: run.Workflow, Queue: run.Queue, Templates: ts, Keyed: keyed, Input: input,
		Version: version, Options: define.Options{Queue: run.Queue, Priority: &run.Priority}})
	if err != nil {
		return 0, "", fmt.Errorf("rerun run %d: %w", runID, err)
	}
	id, err := r.St.RunRerun(ctx, store.RunRerunParams{Run: p, Of: runID, From: ts[at].Name, Done: done, Detail: detail})
	if errors.Is(err, store.ErrInvalidValue) {
		return 0, "", fmt.Errorf("%w: %w", r.Rules.ErrInvalidInput, err)
	}
	return id, run.Workflow, err
}

// templates returns the task templates of run's version: those stored
// for it (workflow_versions), or for a run without a version those of
// the workflow this process registers.
func (r Rerun) templates(ctx context.Context, run *store.Run) ([]store.TaskTemplate, error) {
	if run.Version == nil {
		ts := r.Local(run.Workflow)
		if ts == nil {
			return nil, fmt.Errorf("%w: run %d: workflow %q is not registered by this process, and the run has no stored version", r.Rules.ErrUnknownWorkflow, run.ID, run.Workflow)
		}
		return ts, nil
	}
	ts, err := r.St.WorkflowVersionTasks(ctx, run.Workflow, *run.Version)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: run %d: version %q of workflow %q is not stored", r.Rules.ErrInvalidState, run.ID, *run.Version, run.Workflow)
	}
	return ts, err
}
