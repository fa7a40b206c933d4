package store

import (
	"context"
	"fmt"
	"time"
)

// This file holds the reads of tasks and their events by id and by run.

// TaskGet returns one task.
func (s *Store) TaskGet(ctx context.Context, id int64) (*Task, error) {
	var t Task
	if err := s.raw(`SELECT * FROM ?schema.tasks WHERE id = ?`, id).Scan(ctx, &t); err != nil {
		return nil, notFound(err)
	}
	return &t, nil
}

// TaskListByRun returns a run's tasks in definition order.
func (s *Store) TaskListByRun(ctx context.Context, runID int64) ([]Task, error) {
	var out []Task
	if err := s.raw(`SELECT * FROM ?schema.tasks WHERE id = ANY((SELECT ti.task_ids FROM ?schema.run_rows ti WHERE ti.id = ?)::bigint[]) ORDER BY idx`, runID).Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("list tasks of run %d: %w", runID, err)
	}
	return out, nil
}

// TaskListByStatus returns the ids and statuses of a run's tasks that are
// in one of statuses.
func (s *Store) TaskListByStatus(ctx context.Context, runID int64, statuses []string) ([]Task, error) {
	var out []Task
	if err := s.raw(`SELECT * FROM ?schema.tasks WHERE id = ANY((SELECT ti.task_ids FROM ?schema.run_rows ti WHERE ti.id = ?)::bigint[]) AND status = ANY(?) ORDER BY idx`, runID, array(statuses)).Scan(ctx, &out); err != nil {
		return nil, fmt.Errorf("list tasks of run %d: %w", runID, err)
	}
	return out, nil
}

// TaskExpiredLeases returns up to limit running/deferred tasks whose lease
// expired, oldest first: those whose lease expired at or after since (by
// the database's clock, see Now), or all with the zero time.
func (s *Store) TaskExpiredLeases(ctx context.Context, since time.Time, limit int) ([]Task, error) {
	var out []Task
	var from any // NULL: every expired lease
	if !since.IsZero() {
		from = since
	}
	// The lower bound is where the scan of tasks_lease starts: below it
	// lie, while a long transaction holds back the xmin, the entries of
	// every task run since (see ClaimFloor).
	err := s.raw(`SELECT * FROM ?schema.tasks WHERE status IN ('running', 'deferred') AND lease_expires_at < now()
		AND lease_expires_at >= coalesce(?::timestamptz, '-infinity')
		ORDER BY lease_expires_at LIMIT ?`, from, limit).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("find expired leases: %w", err)
	}
	return out, nil
}

// Now returns the database's clock: now() of a transaction of its own.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.raw(`SELECT now()`).Scan(ctx, &now); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}

// EventListByTask returns a task's events, oldest first. Without JIT:
// the planner prices a BRIN scan of a large partition still written to
// (see HistoryPartitionIndex) far above what it costs.
func (s *Store) EventListByTask(ctx context.Context, taskID int64) ([]Event, error) {
	var out []Event
	if err := s.scanWithoutJIT(ctx, &out, `SELECT * FROM ?schema.task_events WHERE task_id = ? ORDER BY id`, taskID); err != nil {
		return nil, fmt.Errorf("list events of task %d: %w", taskID, err)
	}
	return out, nil
}

// EventListByRun returns a run's events, oldest first.
func (s *Store) EventListByRun(ctx context.Context, runID int64) ([]Event, error) {
	var out []Event
	// By its tasks: events are indexed by task only (see migration 007).
	// re holds the run's task ids (runs.task_ids, see migration 022) with
	// the lowest and highest: the range, drawn together at enqueue, is read
	// in one scan of each partition's index by task (a B-tree's range, or
	// the BRIN of a partition still written to, which = ANY would scan
	// once per id); the ids themselves are a filter (task_id + 0 keeps
	// them out of the index condition). Without JIT: see EventListByTask.
	if err := s.scanWithoutJIT(ctx, &out, `WITH re AS MATERIALIZED (SELECT ti.task_ids AS ids, (SELECT min(x) FROM unnest(ti.task_ids) x) AS lo,
	(SELECT max(x) FROM unnest(ti.task_ids) x) AS hi FROM ?schema.run_rows ti WHERE ti.id = ?)
SELECT e.* FROM ?schema.task_events e WHERE e.task_id BETWEEN (SELECT lo FROM re) AND (SELECT hi FROM re)
	AND e.task_id + 0 = ANY((SELECT ids FROM re)::bigint[]) ORDER BY e.id`, runID); err != nil {
		return nil, fmt.Errorf("list events of run %d: %w", runID, err)
	}
	return out, nil
}
