package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// This file holds what the run page reads to draw its waterfall and the
// durations of its tasks: every transition of every task of a run.

// Transition is one move of a task from one state to another, as the
// waterfall needs it (no worker, error or detail).
type Transition struct {
	// From is "" for a creation record.
	From    string    `json:"from"`
	To      string    `json:"to"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
}

// RunTransitionList returns the transitions of every task of a run, by
// task id, each task's oldest first, in one query over the partitions'
// indexes by task (see EventListByRun); a task without any transition yet
// is absent.
func (s *Store) RunTransitionList(ctx context.Context, runID int64) (map[int64][]Transition, error) {
	var rows []struct {
		TaskID      int64           `bun:"task_id"`
		Transitions json.RawMessage `bun:"transitions,type:jsonb"`
	}
	// Without JIT: see EventListByTask.
	err := s.scanWithoutJIT(ctx, &rows, `WITH re AS MATERIALIZED (SELECT ti.task_ids AS ids, (SELECT min(x) FROM unnest(ti.task_ids) x) AS lo,
	(SELECT max(x) FROM unnest(ti.task_ids) x) AS hi FROM ?schema.run_rows ti WHERE ti.id = ?)
SELECT e.task_id, json_agg(json_build_object('from', coalesce(e.from_status, ''), 'to', e.to_status,
	'attempt', e.attempt, 'at', e.at) ORDER BY e.id) AS transitions
FROM ?schema.task_events e
WHERE e.task_id BETWEEN (SELECT lo FROM re) AND (SELECT hi FROM re)
	AND e.task_id + 0 = ANY((SELECT ids FROM re)::bigint[])
GROUP BY e.task_id`, runID)
	if err != nil {
		return nil, fmt.Errorf("list transitions of run %d: %w", runID, err)
	}
	out := make(map[int64][]Transition, len(rows))
	for _, r := range rows {
		var trs []Transition
		if err := json.Unmarshal(r.Transitions, &trs); err != nil {
			return nil, fmt.Errorf("list transitions of run %d: read those of task %d: %w", runID, r.TaskID, err)
		}
		out[r.TaskID] = trs
	}
	return out, nil
}
