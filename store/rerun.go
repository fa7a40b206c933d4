package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// This file holds the insert of a rerun (RunRerun): a new run of a
// finished run's workflow whose tasks upstream of one task start
// completed with the outputs they had in that run.

// RerunDone is a task of a rerun created completed: its index in the
// workflow and the output it had in the original run.
type RerunDone struct {
	Idx    int
	Output json.RawMessage
}

// RunRerunParams is one rerun to insert.
type RunRerunParams struct {
	// Run is the new run, inserted as RunInsertMany would (without After
	// or an idempotency key).
	Run RunInsertParams
	// Of is the run rerun, From the name of the task it is rerun from
	// (stored as the new run's rerun_of and rerun_from).
	Of   int64
	From string
	// Done are the tasks created completed, each after its dependencies
	// (the dependencies of each are all among the earlier ones).
	Done []RerunDone
	// Detail is the event detail of their completions (why, who asked).
	Detail json.RawMessage
}

// RunRerun inserts p's run in one transaction: its tasks as a new run's,
// the rerun_of and rerun_from of the run row, then p.Done completed with
// their outputs, dependency by dependency, each through the transition
// (Transition) a worker's completion writes: an event with p.Detail, the
// dependents counted down and released with the outputs carried onto
// them, the run's counters and status. A task whose dependencies are all
// in p.Done is ready at commit. It returns the new run's id.
func (s *Store) RunRerun(ctx context.Context, p RunRerunParams) (int64, error) {
	if p.Run.Key != nil || len(p.Run.After) > 0 {
		return 0, fmt.Errorf("rerun run %d: %w: a rerun takes no key and no after", p.Of, ErrInvalidValue)
	}
	if err := p.Run.check(); err != nil {
		return 0, fmt.Errorf("rerun run %d: %w", p.Of, err)
	}
	var id int64
	err := s.InTx(ctx, func(tx *Store) error {
		res, err := tx.runInsertMany(ctx, []RunInsertParams{p.Run}, nil)
		if err != nil {
			return err
		}
		id = res[0].ID
		var ids []int64
		if err := tx.raw(`UPDATE ?schema.run_rows SET rerun_of = ?, rerun_from = ? WHERE id = ? RETURNING task_ids`,
			p.Of, p.From, id).Scan(ctx, pgArray(&ids)); err != nil {
			return err
		}
		// Wave after wave: the tasks whose dependencies the earlier waves
		// completed are ready now.
		done := make(map[int]bool, len(p.Done))
		for rest := p.Done; len(rest) > 0; {
			var wave []TransitionItem
			var waveIdx []int
			var later []RerunDone
			for _, d := range rest {
				if d.Idx < 0 || d.Idx >= len(ids) || d.Idx >= len(p.Run.Tasks) {
					return fmt.Errorf("%w: task index %d of %d", ErrInvalidValue, d.Idx, len(ids))
				}
				if depsIn(p.Run.Tasks[d.Idx].Deps, done) {
					wave = append(wave, TransitionItem{TaskID: ids[d.Idx], To: StatusCompleted, Output: d.Output, Detail: p.Detail})
					waveIdx = append(waveIdx, d.Idx)
				} else {
					later = append(later, d)
				}
			}
			if len(wave) == 0 {
				return fmt.Errorf("%w: done tasks %v wait for tasks not done", ErrInvalidValue, later)
			}
			moved, _, err := tx.TransitionAll(ctx, TransitionParams{From: []string{StatusReady}, Items: wave})
			if err != nil {
				return err
			}
			if len(moved) != len(wave) {
				return fmt.Errorf("rerun: %d of %d tasks completed", len(moved), len(wave))
			}
			for _, i := range waveIdx {
				done[i] = true
			}
			rest = later
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("rerun run %d: %w", p.Of, err)
	}
	return id, nil
}

func depsIn(deps []int, done map[int]bool) bool {
	for _, d := range deps {
		if !done[d] {
			return false
		}
	}
	return true
}

// WorkflowVersionTasks returns the task templates stored for a workflow
// version (workflow_versions.templates), ErrNotFound when none is stored.
func (s *Store) WorkflowVersionTasks(ctx context.Context, workflow, version string) ([]TaskTemplate, error) {
	var raw []byte
	err := s.raw(`SELECT templates FROM ?schema.workflow_versions WHERE workflow = ? AND version = ?`, workflow, version).Scan(ctx, &raw)
	if err != nil {
		return nil, notFound(err)
	}
	var out []TaskTemplate
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("workflow %q version %q: templates: %w", workflow, version, err)
	}
	return out, nil
}
