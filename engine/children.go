package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

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

// spawnStepPrefix starts the journal entries of spawns: a spawn's name
// cannot clash with a Step's, which may not use the engine's prefix.
const spawnStepPrefix = reservedStepPrefix + "spawn/"

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
	seen := make(map[string]bool, len(spawns))
	var queues []string
	for i, s := range spawns {
		where := fmt.Sprintf("spawn %q", s.Name)
		if len(spawns) > 1 {
			where = fmt.Sprintf("spawn %d (%q)", i, s.Name)
		}
		if err := checkLabel("spawn name", s.Name); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("%s: %w: spawn name %q given twice", where, ErrInvalidInput, s.Name)
		}
		seen[s.Name] = true
		p, err := e.prepare(EnqueueParams{Workflow: s.Workflow, Input: s.Input, Options: s.Options})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if p.Queue != "" {
			queues = append(queues, p.Queue)
		}
		steps[i], ps[i] = spawnStepPrefix+s.Name, p
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ctx, end := e.tr.enqueue(ctx, ps)
	defer func() { end(out, err) }()
	if err := e.st.QueueEnsure(ctx, queues); err != nil {
		return nil, fmt.Errorf("spawn runs: %w", err)
	}
	res, err := e.st.RunSpawn(ctx, store.RunSpawnParams{StepHolder: h.holder(), Steps: steps, Runs: ps})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("spawn runs: %w", ErrTaskLost)
	case errors.Is(err, store.ErrInvalidValue):
		return nil, fmt.Errorf("spawn runs: %w: %w", ErrInvalidInput, err)
	case err != nil:
		return nil, fmt.Errorf("spawn runs: %w", err)
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
	key := h.nextWait(store.WaitKindRuns)
	for _, id := range ids {
		if id <= 0 {
			return nil, fmt.Errorf("%w: await runs: run id %d must be positive", ErrInvalidInput, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e := h.ex.e
	var runs []store.RunOutcome
	finished := func(ctx context.Context) (bool, error) {
		list, err := e.st.RunStatusList(ctx, ids)
		if err != nil {
			return false, err
		}
		for _, r := range list {
			if !store.RunIsFinished(r.Status) {
				return false, nil
			}
		}
		runs = list
		return true, nil
	}
	done, err := finished(ctx)
	if err != nil {
		return nil, e.mapErr("await runs", err)
	}
	if !done {
		begun, err := h.journalOnce(ctx, key, func() any { return waitUntil{} })
		if err != nil {
			return nil, fmt.Errorf("await runs: %w", err)
		}
		recheck := signalRecheckPolls * e.cfg.PollInterval
		check := func(ctx context.Context) (bool, time.Duration, error) {
			done, err := finished(ctx)
			if errors.Is(err, store.ErrNotFound) {
				return false, 0, e.mapErr("await runs", err) // pruned or deleted meanwhile
			}
			if err != nil {
				// The database failed: look again at the next interval.
				e.log.WarnContext(ctx, "look at awaited runs", slog.Int64("task", h.ex.Task.ID), slog.Any("error", err))
				return false, recheck, nil
			}
			return done, recheck, nil
		}
		wait := &store.Wait{Kind: store.WaitKindRuns, Name: fmt.Sprintf("%d runs", len(ids)), Since: begun.At}
		if err := h.park(ctx, wait, recheck, check); err != nil {
			return nil, fmt.Errorf("await runs: %w", err)
		}
	}
	if err := e.st.RunOutputList(ctx, runs); err != nil {
		return nil, fmt.Errorf("await runs: %w", err)
	}
	out := make([]RunOutcome, len(runs))
	for i, r := range runs {
		out[i] = RunOutcome{ID: r.ID, Status: r.Status, Outputs: r.Outputs}
	}
	return out, nil
}
