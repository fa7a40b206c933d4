package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// This file holds what the task page reads of a task's durable waits: its
// journal, its signals and the progress of its child runs. Each query is
// an index lookup by task (task_steps' primary key, task_signals_task,
// runs_parent_task).

// StepInfo is a journaled step as the task page shows it: no result, but
// its size, and for an engine-internal entry (a name starting "cairn:")
// what the page needs to say it in words.
type StepInfo struct {
	Name    string    `bun:"name" json:"name"`
	Attempt int       `bun:"attempt" json:"attempt"`
	At      time.Time `bun:"at" json:"at"`
	// Size is the length of the JSON result in bytes.
	Size int64 `bun:"size" json:"size"`
	// Internal is the result of an engine-internal entry without any
	// signal payload; nil for the handler's own steps.
	Internal json.RawMessage `bun:"internal,type:jsonb" json:"-"`
	// Signal is the name of the signal a signal wait took ("" if none).
	Signal string `bun:"signal" json:"-"`
	// Total counts every step of the task, shown or not.
	Total int64 `bun:"total" json:"-"`
}

// TaskStepRecent returns up to limit steps of a task, most recent first.
// Each row's Total counts them all.
func (s *Store) TaskStepRecent(ctx context.Context, taskID int64, limit int) ([]StepInfo, error) {
	var out []StepInfo
	err := s.raw(`
SELECT s.name, s.attempt, s.at, octet_length(s.result::text) AS size,
	CASE WHEN s.name LIKE 'cairn:%' AND jsonb_typeof(s.result) = 'object' THEN s.result - 'payload' END AS internal,
	coalesce(g.name, '') AS signal, count(*) OVER () AS total
FROM ?schema.task_steps s
LEFT JOIN ?schema.task_signals g ON s.name LIKE 'cairn:signal#%' AND jsonb_typeof(s.result) = 'object'
	AND jsonb_typeof(s.result->'signal') = 'number' AND g.id = (s.result->>'signal')::bigint
WHERE s.task_id = ?
ORDER BY s.at DESC, s.name DESC
LIMIT ?`, taskID, limit).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list recent steps of task %d: %w", taskID, err)
	}
	return out, nil
}

// SignalInfo is a signal sent to a task as the task page shows it: no
// payload, but its size.
type SignalInfo struct {
	ID              int64      `bun:"id" json:"id"`
	Name            string     `bun:"name" json:"name"`
	SentAt          time.Time  `bun:"sent_at" json:"sent_at"`
	Size            int64      `bun:"size" json:"payload_size"`
	ConsumedAt      *time.Time `bun:"consumed_at" json:"consumed_at,omitempty"`
	ConsumedAttempt *int       `bun:"consumed_attempt" json:"consumed_attempt,omitempty"`
	// Total counts every signal of the task in the same state (pending
	// or consumed), shown or not.
	Total int64 `bun:"total" json:"-"`
}

// TaskSignalListParams asks for the pending or the consumed signals of
// a task.
type TaskSignalListParams struct {
	TaskID int64
	// Consumed asks for the consumed signals, most recently taken first;
	// else the pending ones, oldest first (the order waits take them in).
	Consumed bool
	Limit    int
}

// signalListPending and signalListConsumed list a task's pending
// signals, oldest first, and its consumed ones, last consumed first.
// Arguments: task id, consumed (false, true), limit.
const (
	signalListPending = `
SELECT id, name, sent_at, octet_length(payload::text) AS size, consumed_at, consumed_attempt, count(*) OVER () AS total
FROM ?schema.task_signals
WHERE task_id = ? AND (consumed_at IS NOT NULL) = ?
ORDER BY id
LIMIT ?`
	signalListConsumed = `
SELECT id, name, sent_at, octet_length(payload::text) AS size, consumed_at, consumed_attempt, count(*) OVER () AS total
FROM ?schema.task_signals
WHERE task_id = ? AND (consumed_at IS NOT NULL) = ?
ORDER BY consumed_at DESC, id DESC
LIMIT ?`
)

// TaskSignalList returns up to p.Limit signals of a task, pending or
// consumed. Each row's Total counts them all.
func (s *Store) TaskSignalList(ctx context.Context, p *TaskSignalListParams) ([]SignalInfo, error) {
	query := signalListPending
	if p.Consumed {
		query = signalListConsumed
	}
	var out []SignalInfo
	err := s.raw(query, p.TaskID, p.Consumed, p.Limit).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list signals of task %d: %w", p.TaskID, err)
	}
	return out, nil
}

// ChildProgress counts the runs a task spawned and how many finished.
type ChildProgress struct {
	Done  int64 `bun:"done" json:"done"`
	Total int64 `bun:"total" json:"total"`
}

// TaskChildProgress counts the child runs of a task and the finished
// ones (completed, failed or cancelled).
func (s *Store) TaskChildProgress(ctx context.Context, taskID int64) (ChildProgress, error) {
	var out ChildProgress
	err := s.raw(`SELECT count(*) FILTER (WHERE status IN ('completed', 'failed', 'cancelled')) AS done, count(*) AS total
FROM ?schema.run_rows WHERE parent_task_id = ?`, taskID).Scan(ctx, &out)
	if err != nil {
		return out, fmt.Errorf("count child runs of task %d: %w", taskID, err)
	}
	return out, nil
}

// RunChildProgressList counts, per task of a run that spawned child runs,
// its child runs and the finished ones, in one query over the
// runs_parent_task index; tasks without children are absent.
func (s *Store) RunChildProgressList(ctx context.Context, runID int64) (map[int64]ChildProgress, error) {
	var rows []struct {
		TaskID int64 `bun:"task_id"`
		ChildProgress
	}
	err := s.raw(`SELECT c.parent_task_id AS task_id,
	count(*) FILTER (WHERE c.status IN ('completed', 'failed', 'cancelled')) AS done, count(*) AS total
FROM ?schema.run_rows c WHERE c.parent_task_id = ANY((SELECT ti.task_ids FROM ?schema.run_rows ti WHERE ti.id = ?)::bigint[])
GROUP BY c.parent_task_id`, runID).Scan(ctx, &rows)
	if err != nil {
		return nil, fmt.Errorf("count child runs of the tasks of run %d: %w", runID, err)
	}
	out := make(map[int64]ChildProgress, len(rows))
	for _, r := range rows {
		out[r.TaskID] = r.ChildProgress
	}
	return out, nil
}
