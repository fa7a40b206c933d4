package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// This file holds the actions on many runs at once (the site's bulk
// actions): each call is one transaction, however many runs it names.

// TaskRefListByRunsStatuses returns the tasks of the given runs that are
// in one of statuses, by run and position.
func (s *Store) TaskRefListByRunsStatuses(ctx context.Context, runIDs []int64, statuses []string) ([]TaskRef, error) {
	if len(runIDs) == 0 {
		return nil, nil
	}
	var out []TaskRef
	err := s.raw(`SELECT id, run_id FROM ?schema.tasks WHERE id = ANY(ARRAY(SELECT unnest(ti.task_ids) FROM ?schema.run_rows ti WHERE ti.id = ANY(?::bigint[]))) AND status = ANY(?::text[]) ORDER BY run_id, idx`,
		array(runIDs), array(statuses)).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list tasks of runs: %w", err)
	}
	return out, nil
}

// RunRetryParams names the runs to retry.
type RunRetryParams struct {
	RunIDs []int64
	// Detail is stored on the events of the tasks sent back to ready
	// (reason, who asked).
	Detail json.RawMessage
}

// retrySet is a task a run retry resets.
type retrySet struct {
	ID     int64  `bun:"id"`
	RunID  int64  `bun:"run_id"`
	Status string `bun:"status"`
	// Root: none of its dependencies is reset with it and all are done,
	// so it goes straight back to ready.
	Root bool `bun:"root"`
}

// RunRetry retries whole runs in one transaction: every failed or
// cancelled task of the runs is reset, with the tasks that were skipped
// (or failed or cancelled) below it, so that the DAG reruns from them.
// Of those, the ones whose dependencies are all done and none reset go
// back to ready at once, as TaskReopen sends a retried task (one more
// attempt, an event, NOTIFY); the others go back to not_started (an event
// each) with their pending dependencies recounted, and are released as
// their dependencies finish again. A task that completed stays
// completed, and a task skipped by its trigger rule while its
// dependencies all completed stays skipped: its rule would decide the
// same again. It returns the moves, those to ready first, and the runs it
// changed; runs with no failed or cancelled task (or unknown) are left
// alone.
func (s *Store) RunRetry(ctx context.Context, p *RunRetryParams) (moved []Moved, runs []int64, err error) {
	if len(p.RunIDs) == 0 {
		return nil, nil, nil
	}
	err = s.InTx(ctx, func(tx *Store) error {
		var set []retrySet
		err := tx.raw(`
WITH RECURSIVE x AS (
	SELECT t.id, t.run_id, t.dependents FROM ?schema.tasks t
	WHERE t.id = ANY(ARRAY(SELECT unnest(ti.task_ids) FROM ?schema.run_rows ti WHERE ti.id = ANY(?::bigint[]))) AND t.status IN ('failed', 'cancelled')
	UNION
	SELECT c.id, c.run_id, c.dependents FROM x
	JOIN ?schema.tasks c ON c.id = ANY(ARRAY(SELECT ti.task_ids[i + 1] FROM ?schema.run_rows ti, unnest(x.dependents) AS i WHERE ti.id = x.run_id))
	WHERE c.status IN ('skipped', 'failed', 'cancelled')
)
SELECT t.id, t.run_id, t.status,
	NOT EXISTS (SELECT 1 FROM ?schema.tasks d WHERE d.id = ANY(ARRAY(SELECT ti.task_ids[i + 1] FROM ?schema.run_rows ti, unnest(t.deps) AS i WHERE ti.id = t.run_id))
		AND (d.status NOT IN ('completed', 'failed', 'skipped', 'cancelled') OR d.id IN (SELECT id FROM x))) AS root
FROM ?schema.tasks t WHERE t.id IN (SELECT id FROM x)
ORDER BY t.id`, array(p.RunIDs)).Scan(ctx, &set)
		if err != nil {
			return fmt.Errorf("find tasks to retry: %w", err)
		}
		if len(set) == 0 {
			return nil
		}
		var items []TransitionItem
		var rest []int64
		var restFrom []string
		for _, t := range set {
			if !slices.Contains(runs, t.RunID) {
				runs = append(runs, t.RunID)
			}
			if t.Root {
				items = append(items, TransitionItem{TaskID: t.ID, To: StatusReady, Detail: p.Detail})
				continue
			}
			rest = append(rest, t.ID)
			restFrom = append(restFrom, t.Status)
		}
		ready, released, err := tx.TransitionAll(ctx, TransitionParams{From: []string{StatusFailed, StatusCancelled}, Items: items})
		if err != nil {
			return err
		}
		moved = append(ready, released...)
		if len(rest) > 0 {
			var reset []Moved
			err = tx.raw(`
WITH x AS (
	SELECT * FROM unnest(?::bigint[], ?::text[]) AS x(id, from_status)
), upd AS (
	UPDATE ?schema.tasks t SET status = 'not_started', finished_at = NULL, updated_at = now(), carried_n = NULL, carried_outputs = NULL,
		max_attempts = CASE WHEN t.status IN ('failed', 'cancelled') THEN greatest(t.max_attempts, t.attempt + 1) ELSE t.max_attempts END,
		pending_deps = (SELECT count(*) FROM ?schema.tasks d WHERE d.id = ANY(ARRAY(SELECT ti.task_ids[i + 1] FROM ?schema.run_rows ti, unnest(t.deps) AS i WHERE ti.id = t.run_id))
			AND (d.status NOT IN ('completed', 'failed', 'skipped', 'cancelled') OR d.id IN (SELECT id FROM x)))
	FROM x WHERE t.id = x.id AND t.status = x.from_status
	RETURNING t.id, t.run_id, t.queue, t.attempt, x.from_status
), ev AS (
	INSERT INTO ?schema.task_events (run_id, task_id, from_status, to_status, attempt, detail)
	SELECT run_id, id, from_status, 'not_started', attempt, '{"reason":"run retried"}' FROM upd
)
SELECT id, run_id, queue, from_status, 'not_started' AS to_status, attempt FROM upd ORDER BY id`,
				array(rest), array(restFrom)).Scan(ctx, &reset)
			if err != nil {
				return fmt.Errorf("reset tasks below the retried ones: %w", err)
			}
			moved = append(moved, reset...)
		}
		slices.Sort(runs)
		return tx.RunRefresh(ctx, runs)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("retry runs: %w", err)
	}
	return moved, runs, nil
}

// RunDeleteFinished deletes those of the given runs that have finished
// (completed, failed or cancelled), with their tasks, events, steps and
// signals, in one statement, and returns the ids it deleted. A run that
// has not finished, or that is unknown, is left alone. Unlike RunPrune it
// also deletes a run whose uniqueness window still holds: its key is
// free again.
func (s *Store) RunDeleteFinished(ctx context.Context, runIDs []int64) ([]int64, error) {
	if len(runIDs) == 0 {
		return nil, nil
	}
	var out []int64
	// Fast runs get their rows stored first (see runMaterialize). The
	// runs are locked, in id order, and their status rechecked on the
	// latest row version: a run retried meanwhile is not deleted.
	err := s.InTx(ctx, func(tx *Store) error {
		if err := tx.runMaterialize(ctx, runIDs); err != nil {
			return err
		}
		// ot is the ids of the tasks of the runs of old, read once for the
		// deletes that match them. Events are matched with = ANY of an
		// array, not IN: over task_events' many partitions the planner
		// would rather hash every partition whole than probe each one's
		// index by task.
		return tx.raw(`
WITH old AS (
	SELECT id FROM ?schema.run_rows WHERE id = ANY(?::bigint[]) AND status IN ('completed', 'failed', 'cancelled')
	ORDER BY id FOR UPDATE
), ot AS (
	SELECT ARRAY(SELECT unnest(r.task_ids) FROM ?schema.run_rows r WHERE r.id IN (SELECT id FROM old)) AS ids
), e AS (
	DELETE FROM ?schema.task_events WHERE task_id = ANY((SELECT ids FROM ot)::bigint[])
), st AS (
	DELETE FROM ?schema.task_steps WHERE task_id = ANY((SELECT ids FROM ot)::bigint[])
), sg AS (
	DELETE FROM ?schema.task_signals WHERE task_id = ANY((SELECT ids FROM ot)::bigint[])
), cb AS (
	DELETE FROM ?schema.callbacks WHERE task_id = ANY((SELECT ids FROM ot)::bigint[])
), lg AS (
	DELETE FROM ?schema.task_logs WHERE task_id = ANY((SELECT ids FROM ot)::bigint[])
), d AS (
	DELETE FROM ?schema.run_rows WHERE id IN (SELECT id FROM old)
	RETURNING id
)
SELECT id FROM d ORDER BY id`, array(runIDs)).Scan(ctx, &out)
	})
	if err != nil {
		return nil, fmt.Errorf("delete runs: %w", err)
	}
	return out, nil
}
