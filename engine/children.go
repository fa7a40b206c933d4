package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/cairnhq/cairn/engine/internal/define"
	"github.com/cairnhq/cairn/store"
)

// Child runs. SpawnRun enqueues a run linked to the task that spawns it
// (runs.parent_task_id) and journals it on the task under its name in
// the same transaction, so a replay returns the same run and never
// spawns twice. AwaitRuns parks the task without a slot, as Sleep does,
// until every run it names has finished; a child run that finishes wakes
// its parent at once (a control NOTIFY sent by the database, see
// 013_child_runs), and the parent also looks again every few poll
// intervals in case a notification was missed. Cancelling a task cancels
// the unfinished runs it spawned (see cancelTree).

// Spawn is one child run of SpawnRuns.
type Spawn struct {
	// Name journals the spawn on the parent task: unique within the task,
	// a later attempt that spawns the same name gets the same run back.
	Name     string
	Workflow string
	Input    any
	Options  []EnqueueOption
}

// SpawnRun enqueues a run of workflow with input as a child of the task:
// the run records the task as its parent, cancelling the task cancels the
// run while it is unfinished, and the run page links the two. The spawn
// is journaled under name in the transaction that inserts the run, so any
// later attempt of the task that spawns name again gets the same run back
// (Existing set) and nothing is inserted. Options are Enqueue's. Refused
// as Enqueue refuses (ErrUnknownWorkflow, ErrInvalidInput naming the
// field, ErrInputTooLarge); a task taken from this worker meanwhile gets
// ErrTaskLost and nothing is written.
func (h *TaskHandle) SpawnRun(ctx context.Context, name, workflow string, input any, opts ...EnqueueOption) (*Run, error) {
	runs, err := h.SpawnRuns(ctx, []Spawn{{Name: name, Workflow: workflow, Input: input, Options: opts}})
	if err != nil {
		return nil, err
	}
	return runs[0], nil
}

// SpawnRuns is SpawnRun for many children in one transaction (one
// statement inserts the runs that are not journaled yet). Nothing is
// written when any of them is invalid; the error names its index and
// name.
func (h *TaskHandle) SpawnRuns(ctx context.Context, spawns []Spawn) (out []*Run, err error) {
	if len(spawns) == 0 {
		return nil, nil
	}
	e := h.ex.e
	steps := make([]string, len(spawns))
	ps := make([]store.RunInsertParams, len(spawns))
	seen, stored := make(map[string]bool, len(spawns)), &define.Stored{Read: e.st.WorkflowVersionLatest, Known: e.Workflows}
	var queues []string
	for i, s := range spawns {
		where, step, err := journalErrs.SpawnStep(i, len(spawns), s.Name, seen)
		if err != nil {
			return nil, err
		}
		p, err := e.prepare(ctx, EnqueueParams{Workflow: s.Workflow, Input: s.Input, Options: s.Options}, stored)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if p.Queue != "" {
			queues = append(queues, p.Queue)
		}
		steps[i], ps[i] = step, p
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, end := e.tr.enqueue(ctx, ps)
	defer func() { end(out, err) }()
	if err := e.st.QueueEnsure(ctx, queues); err != nil {
		return nil, fmt.Errorf("spawn runs: %w", err)
	}
	res, err := h.steps().Spawn(ctx, steps, ps)
	if err != nil {
		return nil, err
	}
	out = make([]*Run, len(res))
	for i, r := range res {
		out[i] = &Run{ID: r.Run, Workflow: spawns[i].Workflow, Existing: r.Existing}
	}
	return out, nil
}

// RunOutcome is a finished run as AwaitRuns returns it: its id, status
// (completed, failed or cancelled) and the outputs of its tasks by task
// name (tasks that stored none are absent).
type RunOutcome struct {
	ID      int64
	Status  string
	Outputs map[string]json.RawMessage
}

// AwaitRuns waits until every run of ids has finished (completed, failed
// or cancelled) and returns each one's outcome, in the order of ids.
// While any is unfinished the task is parked without a slot, as Sleep
// parks it; a finishing child run wakes it at once. After a crash or a
// shutdown the task goes back to ready and its next attempt (replaying
// its journaled steps and spawns) waits again for what is left. Any run
// may be awaited, not only children. An unknown run id is refused with
// ErrNotFound. It returns ctx's error if the task is cancelled or the
// engine shuts down meanwhile.
func (h *TaskHandle) AwaitRuns(ctx context.Context, ids ...int64) ([]RunOutcome, error) {
	runs, err := h.steps().AwaitRuns(ctx, ids, h.park)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	out := make([]RunOutcome, len(runs))
	for i, r := range runs {
		out[i] = RunOutcome{ID: r.ID, Status: r.Status, Outputs: r.Outputs}
	}
	return out, nil
}
