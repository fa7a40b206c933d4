package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// This file holds child runs: runs spawned by a task (runs.parent_task_id,
// see 013_child_runs), journaled on the parent as steps.

// WaitKindRuns is the durable wait of a task waiting for runs to finish.
const WaitKindRuns = "runs"

// SpawnResult is the journaled result of a spawn step: the child run, and
// whether it existed already (its idempotency key was held; as RunSpawn
// returns it, also: spawned by an earlier call).
type SpawnResult struct {
	Run      int64 `json:"run"`
	Existing bool  `json:"existing,omitempty"`
}

// RunSpawnParams asks to spawn child runs of the holder's task.
type RunSpawnParams struct {
	StepHolder
	// Steps are the names the spawns are journaled under, one per run.
	Steps []string
	// Runs are the runs to insert, in the order of Steps; their
	// ParentTaskID is set to the holder's task.
	Runs []RunInsertParams
}

// RunSpawn inserts the child runs of p whose step is not journaled yet and
// journals each (step -> run id), in one transaction that holds the
// parent task's row while it is still the holder's: a spawn is journaled
// exactly when its run exists, and a replay gets the journaled run back
// without inserting. Results are in the order of p.Steps. ErrNotFound:
// the task is no longer the holder's (nothing is written).
func (s *Store) RunSpawn(ctx context.Context, p RunSpawnParams) ([]SpawnResult, error) {
	if len(p.Steps) != len(p.Runs) {
		return nil, fmt.Errorf("spawn runs: %d step names for %d runs", len(p.Steps), len(p.Runs))
	}
	out := make([]SpawnResult, len(p.Runs))
	err := s.InTx(ctx, func(tx *Store) error {
		if err := tx.lockHeld(ctx, p.StepHolder); err != nil {
			return err
		}
		var done []Step
		if err := tx.raw(`SELECT task_id, name, result, attempt, at FROM ?schema.task_steps WHERE task_id = ? AND name = ANY(?::text[])`,
			p.TaskID, array(p.Steps)).Scan(ctx, &done); err != nil {
			return err
		}
		journaled := make(map[string]json.RawMessage, len(done))
		for _, d := range done {
			journaled[d.Name] = d.Result
		}
		var todo []int
		var ps []RunInsertParams
		for i, name := range p.Steps {
			if r, ok := journaled[name]; ok {
				if err := json.Unmarshal(r, &out[i]); err != nil {
					return fmt.Errorf("decode journaled spawn %q: %w", name, err)
				}
				out[i].Existing = true // spawned before: no new run
				continue
			}
			rp := p.Runs[i]
			parent := p.TaskID
			rp.ParentTaskID = &parent
			todo = append(todo, i)
			ps = append(ps, rp)
		}
		if len(ps) == 0 {
			return nil
		}
		ins, err := tx.RunInsertMany(ctx, ps)
		if err != nil {
			return err
		}
		for k, i := range todo {
			res := SpawnResult{Run: ins[k].ID, Existing: ins[k].Existing}
			b, err := json.Marshal(res)
			if err != nil {
				return err
			}
			var st Step
			if err := tx.stepSave(ctx, p.StepHolder, p.Steps[i], b, &st); err != nil {
				return err
			}
			out[i] = res
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("spawn runs of task %d: %w", p.TaskID, err)
	}
	return out, nil
}

// RunOutcome is a run's status and, per task, its output.
type RunOutcome struct {
	ID      int64                      `json:"id"`
	Status  string                     `json:"status"`
	Outputs map[string]json.RawMessage `json:"outputs,omitempty"`
}

// RunStatusList returns the status of each of the runs, in the order of
// ids. ErrNotFound names the first unknown one.
func (s *Store) RunStatusList(ctx context.Context, ids []int64) ([]RunOutcome, error) {
	var rows []struct {
		ID     int64  `bun:"id"`
		Status string `bun:"status"`
	}
	if err := s.raw(`SELECT id, status FROM ?schema.runs WHERE id = ANY(?::bigint[])`, array(ids)).Scan(ctx, &rows); err != nil {
		return nil, fmt.Errorf("read status of %d runs: %w", len(ids), err)
	}
	by := make(map[int64]string, len(rows))
	for _, r := range rows {
		by[r.ID] = r.Status
	}
	out := make([]RunOutcome, len(ids))
	for i, id := range ids {
		st, ok := by[id]
		if !ok {
			return nil, fmt.Errorf("run %d: %w", id, ErrNotFound)
		}
		out[i] = RunOutcome{ID: id, Status: st}
	}
	return out, nil
}

// RunOutputList fills the outputs of each run: task name -> output, for
// the tasks that stored one.
func (s *Store) RunOutputList(ctx context.Context, runs []RunOutcome) error {
	ids := make([]int64, len(runs))
	for i, r := range runs {
		ids[i] = r.ID
	}
	var rows []struct {
		RunID  int64           `bun:"run_id"`
		Name   string          `bun:"name"`
		Output json.RawMessage `bun:"output"`
	}
	if err := s.raw(`SELECT run_id, name, output FROM ?schema.tasks WHERE id = ANY(ARRAY(SELECT unnest(ti.task_ids) FROM ?schema.run_rows ti WHERE ti.id = ANY(?::bigint[]))) AND output IS NOT NULL ORDER BY run_id, idx`,
		array(ids)).Scan(ctx, &rows); err != nil {
		return fmt.Errorf("read outputs of %d runs: %w", len(ids), err)
	}
	by := make(map[int64]map[string]json.RawMessage, len(runs))
	for _, r := range rows {
		if by[r.RunID] == nil {
			by[r.RunID] = map[string]json.RawMessage{}
		}
		by[r.RunID][r.Name] = r.Output
	}
	for i := range runs {
		runs[i].Outputs = by[runs[i].ID]
	}
	return nil
}

// ChildRun is a run spawned by a task of another run, as the run page
// lists it.
type ChildRun struct {
	ID         int64  `bun:"id" json:"id"`
	Workflow   string `bun:"workflow" json:"workflow"`
	Status     string `bun:"status" json:"status"`
	ParentTask string `bun:"parent_task" json:"parent_task"`
}

// RunChildList returns up to limit runs spawned by the tasks of a run,
// oldest first.
func (s *Store) RunChildList(ctx context.Context, runID int64, limit int) ([]ChildRun, error) {
	var out []ChildRun
	if err := s.raw(`SELECT c.id, c.workflow, c.status, t.name AS parent_task
		FROM ?schema.tasks t JOIN ?schema.runs c ON c.parent_task_id = t.id
		WHERE t.id = ANY((SELECT ti.task_ids FROM ?schema.run_rows ti WHERE ti.id = ?)::bigint[]) ORDER BY c.id LIMIT ?`, runID, limit).Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("list child runs of run %d: %w", runID, err)
	}
	return out, nil
}

// RunParent is the task (and its run) that spawned a child run.
type RunParent struct {
	RunID    int64  `bun:"run_id" json:"run_id"`
	TaskID   int64  `bun:"task_id" json:"task_id"`
	TaskName string `bun:"task_name" json:"task_name"`
}

// RunParentGet returns the parent task of a child run; ErrNotFound when
// the run has none (or its parent was pruned).
func (s *Store) RunParentGet(ctx context.Context, runID int64) (*RunParent, error) {
	var out RunParent
	if err := s.raw(`SELECT t.run_id, t.id AS task_id, t.name AS task_name
		FROM ?schema.run_rows r JOIN ?schema.tasks t ON t.id = r.parent_task_id WHERE r.id = ?`, runID).Scan(ctx, &out); err != nil {
		return nil, notFound(err)
	}
	return &out, nil
}

// TaskCancelTree cancels the tasks ids that have not finished (their
// events carry detail) and, in the same transaction, the unfinished
// tasks of the runs they spawned, and of the runs those spawned, down the
// tree (childDetail): the function cancel_tree (migration 035), which the
// SQL API's cancel_run runs too. Either the whole tree moves or nothing
// does, so a process that dies mid-way leaves no child running under a
// cancelled parent. moved lists every task moved, parents first;
// released the dependents and waiting runs' roots the cancel released.
func (s *Store) TaskCancelTree(ctx context.Context, ids []int64, detail, childDetail json.RawMessage) (moved, released []Moved, err error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	err = s.InTx(ctx, func(tx *Store) error {
		rows := &movedRows{out: make([]Moved, 0, len(ids))}
		if err := tx.scanPrepared(ctx, rows, tx.query("TaskCancelTree"), pgArray(ids), jsonArg(detail), jsonArg(childDetail)); err != nil {
			return err
		}
		moved, released = rows.moves()
		rel, err := tx.releaseAll(ctx, rows.unblocked, rows.settle)
		released = append(released, rel...)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("cancel tasks and their child runs: %w", err)
	}
	return moved, released, nil
}
