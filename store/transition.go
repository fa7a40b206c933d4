package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/cairnhq/cairn/store/rule"
)

// This file holds the compare-and-set transition of tasks (Transition),
// the release of the dependents it unblocks, and the reopening of a
// finished task (TaskReopen). Its statement is in sql/transition.sql.

// IsDone reports whether status releases dependents.
func IsDone(status string) bool {
	switch status {
	case StatusCompleted, StatusFailed, StatusSkipped, StatusCancelled:
		return true
	}
	return false
}

// TransitionItem is one task's move in a Transition.
type TransitionItem struct {
	TaskID int64  `json:"id"`
	To     string `json:"to_status"`
	// From, when set, is the state the caller knows the row is in (one of
	// the params' From): a worker's batch whose items all say so is
	// written without reading and locking the rows ahead.
	From string `json:"from_status,omitempty"`
	// Attempt, when non-zero, must equal the row's attempt (CAS).
	Attempt int `json:"attempt,omitempty"`
	// Error is stored as the task's last error and on the event.
	Error *string `json:"error,omitempty"`
	// Detail is stored on the event (stack, log, reason).
	Detail json.RawMessage `json:"detail,omitempty"`
	// Output is stored when To is completed.
	Output json.RawMessage `json:"output,omitempty"`
	// DelayMs is how long after the transaction's time a task moving to
	// ready becomes claimable (database clock, so process clocks never skew it).
	DelayMs int64 `json:"delay_ms,omitempty"`
	// Rescue counts the move as a rescue from a dead worker.
	Rescue bool `json:"rescue,omitempty"`
	// Uncounted ends the attempt without spending the attempt budget (a
	// graceful stop interrupted it): max_attempts grows by one, so the
	// attempt number and the budget still agree, and Error goes on the
	// event only, not into the task's last error.
	Uncounted bool `json:"uncounted,omitempty"`
	// LeaseMs, when non-zero, renews the lease of a task that stays held
	// (to running or deferred) to this long after the transaction's time.
	LeaseMs int64 `json:"lease_ms,omitempty"`
	// WaitKind, WaitName, WaitUntil and WaitSince are the durable wait a
	// move to deferred parks the task in (see SetWait); any move clears
	// the row's wait unless it sets one.
	WaitKind  string     `json:"wait_kind,omitempty"`
	WaitName  string     `json:"wait_name,omitempty"`
	WaitUntil *time.Time `json:"wait_until,omitempty"`
	WaitSince *time.Time `json:"wait_since,omitempty"`
	// WaitEveryMs is the check interval of the DeferUntil condition a
	// move to deferred parks the task in (see SetCondition); any other
	// move clears it.
	WaitEveryMs int64 `json:"wait_every_ms,omitempty"`
}

// TransitionParams moves a batch of tasks with compare-and-set: a task
// moves only when its row is still in one of From (and, when WorkerID is
// set, held by that worker; when LeaseExpired is set, its lease expired).
type TransitionParams struct {
	From         []string
	WorkerID     int64
	LeaseExpired bool
	Items        []TransitionItem
}

// statesKnown reports whether p is a worker moving its own tasks and
// every item names its row's state (one of From): the rows need not be
// read and locked ahead (TaskTransitionKnown in sql/transition.sql).
func (p TransitionParams) statesKnown() bool {
	if p.WorkerID == 0 || p.LeaseExpired {
		return false
	}
	for _, it := range p.Items {
		if it.From == "" || !slices.Contains(p.From, it.From) {
			return false
		}
	}
	return true
}

// Moved is a committed move of one task.
type Moved struct {
	TaskID   int64  `bun:"id"`
	RunID    int64  `bun:"run_id"`
	Queue    string `bun:"queue"`
	From     string `bun:"from_status"`
	To       string `bun:"to_status"`
	Attempt  int    `bun:"attempt"`
	WorkerID *int64 `bun:"held_by"`
}

// Transition applies p in one transaction: the rows move, one event per
// move is appended, dependents whose dependencies are all done become
// ready or skipped (as their trigger rules decide, see package rule,
// cascading), the runs' statuses are refreshed, and everything is announced with NOTIFY at commit. It returns
// the moves of p's items that took place (others found their row elsewhere).
//
// One statement does the common case whole: the moves, their events, the
// dependents' counters, dependents with the default rule whose
// dependencies all completed (made ready in SQL), the run statuses and the
// notifications. Only dependents that need their trigger rule decided by
// rule.Eval (a custom rule, or a dependency that did not complete) take
// more statements, in the same transaction.
func (s *Store) Transition(ctx context.Context, p TransitionParams) ([]Moved, error) {
	moved, _, err := s.TransitionAll(ctx, p)
	return moved, err
}

// TransitionAll is Transition that also returns the moves of the
// dependents the write released (not_started to ready or skipped,
// cascading), which Transition leaves out. Of those made ready in SQL only
// TaskID, From and To are set.
func (s *Store) TransitionAll(ctx context.Context, p TransitionParams) (moved, released []Moved, err error) {
	if len(p.Items) == 0 {
		return nil, nil, nil
	}
	err = s.InTx(ctx, func(tx *Store) error {
		var unblocked, settle []int64
		var err error
		var rel []Moved
		moved, released, unblocked, settle, err = tx.transition(ctx, p)
		if err != nil {
			return err
		}
		rel, err = tx.releaseAll(ctx, unblocked, settle)
		released = append(released, rel...)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("transition tasks: %w", err)
	}
	return moved, released, nil
}

// itemsJSON is items as the statements read them: a JSON array, empty
// when there are none (json.Marshal writes a nil slice as null, which
// jsonb_to_recordset refuses: a completion write of only lost attempts,
// which write nothing, claiming along for their slots, failed so).
func itemsJSON(items []TransitionItem) ([]byte, error) {
	if len(items) == 0 {
		return []byte("[]"), nil
	}
	return json.Marshal(items)
}

// transition runs the CAS statement and returns the moves, the
// dependents it made ready in SQL, the dependents whose last pending
// dependency just finished and whose trigger rule Go must evaluate, and
// the runs it finished that other runs wait for (see runDepsSettle).
func (s *Store) transition(ctx context.Context, p TransitionParams) (moved, promoted []Moved, unblocked, settle []int64, err error) {
	items, err := itemsJSON(p.Items)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	known := p.statesKnown()
	args := []any{jsonArg(items)}
	if !known {
		args = append(args, pgArray(p.From))
	}
	// The transition by no worker that checks no lease is the function
	// task_transition (migration 035), which the SQL API's cancel_run
	// runs too; the others take the holder and the channels.
	if p.WorkerID != 0 || p.LeaseExpired || known {
		if p.WorkerID != 0 {
			args = append(args, p.WorkerID)
		}
		var actor *int64
		if p.WorkerID != 0 {
			actor = &p.WorkerID
		}
		args = append(args, actor, s.EventsChannel(), s.ReadyChannel(), s.ControlChannel(), p.WorkerID == 0)
	}
	// Sized ahead: the scan appends row by row.
	rows := &movedRows{out: make([]Moved, 0, len(p.Items))}
	if err := s.scanPrepared(ctx, rows, s.transitionQuery(p.WorkerID != 0, p.LeaseExpired, known), args...); err != nil {
		return nil, nil, nil, nil, err
	}
	moved, promoted = rows.moves()
	return moved, promoted, rows.unblocked, rows.settle, nil
}

type releaseRow struct {
	ID          int64           `bun:"id"`
	RunID       int64           `bun:"run_id"`
	TriggerRule json.RawMessage `bun:"trigger_rule"`
	Input       json.RawMessage `bun:"input"`
	Deps        json.RawMessage `bun:"deps"`
	DelayMs     int64           `bun:"delay_ms"`
}

// releaseAll releases unblocked (see release) and settles the waiters of
// the runs of settle (see runDepsSettle), wave after wave, until nothing
// is left: a run finished by a wave may release the roots of runs that
// wait for it. It returns the moves.
func (s *Store) releaseAll(ctx context.Context, unblocked, settle []int64) (released []Moved, err error) {
	for len(unblocked) > 0 || len(settle) > 0 {
		if len(settle) > 0 {
			more, err := s.runDepsSettle(ctx, settle)
			if err != nil {
				return released, err
			}
			unblocked, settle = append(unblocked, more...), nil
			continue
		}
		var rel []Moved
		rel, unblocked, settle, err = s.release(ctx, unblocked)
		released = append(released, rel...)
		if err != nil {
			return released, err
		}
	}
	return released, nil
}

// release decides ready or skipped for not_started tasks whose
// dependencies are all done, moves them, and returns the moves, the next
// wave and the runs the moves finished that others wait for. A root
// task's dependencies are the runs its run waits for (see WithAfter), as
// rule.Deps with Run set.
func (s *Store) release(ctx context.Context, ids []int64) (moved []Moved, unblocked, settle []int64, err error) {
	var rows []releaseRow
	err = s.raw(`
SELECT t.id, t.run_id, t.trigger_rule, r.input,
	CASE WHEN cardinality(t.deps) > 0 THEN
	(SELECT coalesce(jsonb_agg(jsonb_build_object('idx', d.idx, 'name', d.name, 'status', d.status, 'output', d.output) ORDER BY array_position(t.deps, d.idx)), '[]')
	 FROM ?schema.tasks d WHERE d.id = ANY(ARRAY(SELECT r.task_ids[i + 1] FROM unnest(t.deps) AS i)))
	ELSE
	(SELECT coalesce(jsonb_agg(jsonb_build_object('run', d.after_run_id, 'status', d.status) ORDER BY d.after_run_id), '[]')
	 FROM ?schema.run_deps d WHERE d.run_id = t.run_id)
	END AS deps,
	-- A root keeps the start time its run was given (WithRunAt).
	CASE WHEN cardinality(t.deps) = 0 THEN greatest(0, ceil(extract(epoch FROM t.available_at - now()) * 1000))::bigint ELSE 0 END AS delay_ms
FROM ?schema.tasks t JOIN ?schema.run_rows r ON r.id = t.run_id
WHERE t.id = ANY(?) AND t.status = 'not_started' AND t.pending_deps = 0`, array(ids)).Scan(ctx, &rows)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load released tasks: %w", err)
	}
	items := make([]TransitionItem, 0, len(rows))
	for _, r := range rows {
		var deps []rule.Dep
		if err := json.Unmarshal(r.Deps, &deps); err != nil {
			return nil, nil, nil, err
		}
		to := StatusSkipped
		ok, err := rule.Eval(r.TriggerRule, deps, r.Input)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("trigger rule of task %d: %w", r.ID, err)
		}
		if ok {
			to = StatusReady
		}
		items = append(items, TransitionItem{TaskID: r.ID, To: to, DelayMs: r.DelayMs})
	}
	if len(items) == 0 {
		return nil, nil, nil, nil
	}
	moved, promoted, unblocked, settle, err := s.transition(ctx, TransitionParams{From: []string{StatusNotStarted}, Items: items})
	return append(moved, promoted...), unblocked, settle, err
}

// string -> string

// transitionQuery is the transition statement for the conditions of p:
// known is a worker moving tasks whose states it knows (see
// TransitionParams.statesKnown).
func (s *Store) transitionQuery(byWorker, leaseExpired, known bool) string {
	return s.query(transitionName(byWorker, leaseExpired, known))
}

// TaskReopenParams is a task to send back to ready.
type TaskReopenParams struct {
	TaskID int64
	// From are the states it may leave (failed, cancelled, interrupted).
	From []string
	// Detail is stored on the task's event (reason, who asked).
	Detail json.RawMessage
}

// TaskReopen moves a task from one of p.From (failed, cancelled,
// interrupted) back to ready, and sends the dependents that were skipped
// because of it (transitively) back to not_started, so they wait for it
// again. It returns the moves it made, the task's first; none when the
// task was in none of p.From.
func (s *Store) TaskReopen(ctx context.Context, p *TaskReopenParams) ([]Moved, error) {
	var out []Moved
	err := s.InTx(ctx, func(tx *Store) error {
		moved, released, err := tx.TransitionAll(ctx, TransitionParams{From: p.From,
			Items: []TransitionItem{{TaskID: p.TaskID, To: StatusReady, Detail: p.Detail}}})
		if err != nil || len(moved) == 0 {
			return err
		}
		out = append(moved, released...)
		var reset []Moved
		err = tx.raw(`
WITH RECURSIVE d AS (
	SELECT c.id, c.run_id, c.dependents FROM ?schema.tasks t
	JOIN ?schema.tasks c ON c.id = ANY(ARRAY(SELECT ti.task_ids[i + 1] FROM ?schema.run_rows ti, unnest(t.dependents) AS i WHERE ti.id = t.run_id))
	WHERE t.id = ? AND c.status = 'skipped'
	UNION
	SELECT c.id, c.run_id, c.dependents FROM d
	JOIN ?schema.tasks c ON c.id = ANY(ARRAY(SELECT ti.task_ids[i + 1] FROM ?schema.run_rows ti, unnest(d.dependents) AS i WHERE ti.id = d.run_id))
	WHERE c.status = 'skipped'
), upd AS (
	UPDATE ?schema.tasks t SET status = 'not_started', finished_at = NULL, updated_at = now(), carried_n = NULL, carried_outputs = NULL,
		pending_deps = (SELECT count(*) FROM ?schema.tasks x WHERE x.id = ANY(ARRAY(SELECT ti.task_ids[i + 1] FROM ?schema.run_rows ti, unnest(t.deps) AS i WHERE ti.id = t.run_id))
			AND (x.status NOT IN ('completed', 'failed', 'skipped', 'cancelled') OR x.id IN (SELECT id FROM d)))
	FROM d WHERE t.id = d.id
	RETURNING t.id, t.run_id, t.queue, t.attempt
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, attempt, detail)
	SELECT run_id, id, 'skipped', 'not_started', attempt, '{"reason":"dependency retried"}' FROM upd
)
SELECT id, run_id, queue, 'skipped' AS from_status, 'not_started' AS to_status, attempt FROM upd`, p.TaskID).Scan(ctx, &reset)
		if err != nil {
			return fmt.Errorf("reopen dependents of task %d: %w", p.TaskID, err)
		}
		out = append(out, reset...)
		return tx.RunRefresh(ctx, []int64{moved[0].RunID})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// transitionName is the name of the transition statement that checks
// each row's holder (byWorker), its lease (leaseExpired), or neither,
// locking the rows ahead, or that writes a worker's rows in states it
// knows (known, see TransitionParams.statesKnown).
func transitionName(byWorker, leaseExpired, known bool) string {
	switch {
	case known:
		return "TaskTransitionKnown"
	case byWorker && leaseExpired:
		return "TaskTransitionByWorkerLeaseExpired"
	case byWorker:
		return "TaskTransitionByWorker"
	case leaseExpired:
		return "TaskTransitionLeaseExpired"
	}
	return "TaskTransition"
}
