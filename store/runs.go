package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// runRefreshSQL recounts the tasks of runs and stores the counters and
// the status they imply, one run at a time (a lateral index lookup per
// run, whatever the table statistics say): a run whose tasks are all done
// is completed, failed (one failed) or cancelled (one cancelled, none
// failed); one with an interrupted task is interrupted; a paused run is
// paused; else it is running once a task started, pending before. It
// returns each run and whether others wait for it and it has finished
// (settle, see runDepsSettle). Arguments: run ids.
const runRefreshSQL = `
UPDATE ?schema.run_rows r SET done_tasks = c.done,
	failed_tasks = c.failed,
	cancelled_tasks = c.cancelled,
	interrupted_tasks = c.interrupted,
	status = CASE
		WHEN c.done = r.task_count THEN CASE
			WHEN c.failed > 0 THEN 'failed' WHEN c.cancelled > 0 THEN 'cancelled' ELSE 'completed' END
		WHEN c.interrupted > 0 THEN 'interrupted'
		WHEN r.paused THEN 'paused'
		WHEN r.started_at IS NOT NULL OR c.started THEN 'running'
		ELSE 'pending' END,
	started_at = coalesce(r.started_at, CASE WHEN c.started THEN coalesce(c.first_start, now()) END),
	finished_at = CASE WHEN c.done = r.task_count THEN coalesce(r.finished_at, now()) END,
	updated_at = now()
FROM (
	SELECT rr.id, c.* FROM ?schema.run_rows rr CROSS JOIN LATERAL (
		SELECT count(*) FILTER (WHERE status IN ('completed', 'failed', 'skipped', 'cancelled')) AS done,
			count(*) FILTER (WHERE status = 'failed') AS failed,
			count(*) FILTER (WHERE status = 'cancelled') AS cancelled,
			count(*) FILTER (WHERE status = 'interrupted') AS interrupted,
			coalesce(bool_or(status NOT IN ('not_started', 'ready') OR attempt > 0), false) AS started,
			min(coalesce(first_started_at, started_at)) AS first_start
		FROM ?schema.tasks t WHERE t.id = ANY(rr.task_ids)
	) c
	WHERE rr.id = ANY(?::bigint[])
) c
WHERE r.id = c.id
RETURNING r.id, (r.has_waiters AND r.status IN ('completed', 'failed', 'cancelled')) AS settle`

// clearRunFast makes the fast runs among runIDs (see migration 019)
// ordinary runs, whose transitions write their rows, and returns their
// ids. The update takes each task's row lock, as a transition does: a
// transition in flight commits first, one that comes after writes the
// run row. It must come before tx locks any run row, in the order a
// transition takes its locks (task, then run).
func (tx *Store) clearRunFast(ctx context.Context, runIDs []int64) ([]int64, error) {
	var fast []int64
	err := tx.raw(`UPDATE ?schema.tasks SET run_fast = false WHERE id = ANY(ARRAY(SELECT unnest(ti.task_ids) FROM ?schema.run_rows ti WHERE ti.id = ANY(?::bigint[]))) AND run_fast RETURNING run_id`,
		array(runIDs)).Scan(ctx, &fast)
	if err != nil {
		return nil, fmt.Errorf("clear fast runs: %w", err)
	}
	return fast, nil
}

// runMaterialize makes the fast runs among runIDs ordinary runs and
// stores in their rows what the view runs reads, so that what follows in tx
// can read and lock the run rows as they are. The run rows read the same
// before and after. It must come before tx locks any run row.
func (tx *Store) runMaterialize(ctx context.Context, runIDs []int64) error {
	fast, err := tx.clearRunFast(ctx, runIDs)
	if err != nil || len(fast) == 0 {
		return err
	}
	_, err = tx.exec(ctx, `
UPDATE ?schema.run_rows r SET status = v.status, done_tasks = v.done_tasks, failed_tasks = v.failed_tasks,
	cancelled_tasks = v.cancelled_tasks, interrupted_tasks = v.interrupted_tasks,
	started_at = v.started_at, finished_at = v.finished_at, updated_at = v.updated_at
FROM ?schema.runs v
WHERE v.id = r.id AND r.id = ANY(?::bigint[])`, array(fast))
	if err != nil {
		return fmt.Errorf("store fast runs: %w", err)
	}
	return nil
}

// RunAwait marks a run as awaited: from its next transition on, the
// database announces its end on the control channel (ControlRun, see
// migration 025). A fast run is made ordinary first (runMaterialize), so
// that its transitions write its row. The caller reads the run's status
// after RunAwait returns: an end committed before it is not announced.
func (s *Store) RunAwait(ctx context.Context, runID int64) error {
	return s.InTx(ctx, func(tx *Store) error {
		if err := tx.runMaterialize(ctx, []int64{runID}); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, `UPDATE ?schema.run_rows SET awaited = true WHERE id = ? AND NOT awaited`, runID); err != nil {
			return fmt.Errorf("mark run %d awaited: %w", runID, err)
		}
		return nil
	})
}

// RunRefresh recounts the tasks of the given runs and stores their
// counters and status, fast runs (see runMaterialize) made ordinary. It
// locks the run rows first, in id order, and counts in a later statement:
// a transition of one of their tasks that commits meanwhile then either
// is counted here or adds its deltas after. A run it finishes that others
// wait for releases their roots.
func (s *Store) RunRefresh(ctx context.Context, runIDs []int64) error {
	if len(runIDs) == 0 {
		return nil
	}
	return s.InTx(ctx, func(tx *Store) error {
		if _, err := tx.clearRunFast(ctx, runIDs); err != nil {
			return err
		}
		if _, err := tx.exec(ctx, `SELECT id FROM ?schema.run_rows WHERE id = ANY(?::bigint[]) ORDER BY id FOR UPDATE`, array(runIDs)); err != nil {
			return fmt.Errorf("lock runs: %w", err)
		}
		var rows []struct {
			ID     int64 `bun:"id"`
			Settle bool  `bun:"settle"`
		}
		if err := tx.raw(runRefreshSQL, array(runIDs)).Scan(ctx, &rows); err != nil {
			return fmt.Errorf("refresh run status: %w", err)
		}
		var settle []int64
		for _, r := range rows {
			if r.Settle {
				settle = append(settle, r.ID)
			}
		}
		_, err := tx.releaseAll(ctx, nil, settle)
		return err
	})
}

// RunGet returns one run.
func (s *Store) RunGet(ctx context.Context, id int64) (*Run, error) {
	var r Run
	if err := s.raw(`SELECT * FROM ?schema.runs WHERE id = ?`, id).Scan(ctx, &r); err != nil {
		return nil, notFound(err)
	}
	return &r, nil
}

// runFinished are the statuses of a finished run.
var runFinished = []string{RunCompleted, RunFailed, RunCancelled}

// RunFinishedStatuses returns the statuses of a finished run:
// completed, failed and cancelled.
func RunFinishedStatuses() []string { return slices.Clone(runFinished) }

// RunIsFinished reports whether a run in status s has finished:
// completed, failed or cancelled.
func RunIsFinished(s string) bool { return slices.Contains(runFinished, s) }

// RunSetPaused pauses or resumes a run that has not finished and refreshes
// its status. It returns the status the run had and whether it changed the
// run: false (and no error) for a finished run, which it leaves alone. The
// check and the change hold the run's row lock in one transaction. It
// returns ErrNotFound for an unknown run.
func (s *Store) RunSetPaused(ctx context.Context, id int64, paused bool) (string, bool, error) {
	var status string
	err := s.InTx(ctx, func(tx *Store) error {
		if err := tx.runMaterialize(ctx, []int64{id}); err != nil {
			return err
		}
		if err := tx.raw(`SELECT status FROM ?schema.run_rows WHERE id = ? FOR UPDATE`, id).Scan(ctx, &status); err != nil {
			return fmt.Errorf("lock run %d: %w", id, notFound(err))
		}
		if RunIsFinished(status) {
			return nil
		}
		if _, err := tx.exec(ctx, `UPDATE ?schema.run_rows SET paused = ?, updated_at = now() WHERE id = ?`, paused, id); err != nil {
			return fmt.Errorf("pause run %d: %w", id, err)
		}
		if !paused {
			// Wake workers: its ready tasks are claimable again.
			if _, err := tx.exec(ctx, readyNotifyByRun,
				s.ReadyChannel(), id); err != nil {
				return err
			}
		}
		return tx.RunRefresh(ctx, []int64{id})
	})
	if err != nil {
		return "", false, err
	}
	return status, !RunIsFinished(status), nil
}

// RunPrune deletes runs (with their tasks and events) that finished more
// than olderThan ago, batch at a time, and returns how many. A run whose
// uniqueness window (UniqueFor) still holds is kept until it ends, so its
// key keeps returning it; a pruned run frees its key.
//
// Each batch starts where the one before ended, in (created_at, id)
// order, rather than at the oldest run: the index entries of the runs it
// deleted stay in runs_created until a vacuum, and a scan from the start
// would step over all of them again, batch after batch (a month of
// history slowed from 14,000 to 7,800 runs/s within 9M runs that way).
// Runs it passes over (unfinished, or unique for longer) are looked at
// again by the next call.
func (s *Store) RunPrune(ctx context.Context, olderThan time.Duration, batch int) (int64, error) {
	var total int64
	var after pruneCursor // zero: before every run
	for {
		// Tasks go by their foreign key's cascade; events, steps, signals
		// and logs have none (see migrations 003, 011 and 014) and go here, by
		// their tasks (see migration 007); events older than the cutoff are
		// left to HistoryPartitionDrop.
		//
		// ot is the ids of the tasks of the runs of old, read once for the
		// deletes that match them. e and ed delete the events of old that no
		// partition drop will take: those since the cutoff, and those of the
		// DEFAULT partition. Older events are in daily partitions that end
		// before the cutoff or within a day of it: HistoryPartitionDrop
		// drops them whole, without a dead tuple. A run of old finished
		// before the cutoff, so its events since then are within the hour
		// after it (historyRunMargin: a transaction's time is when it
		// began): the bound keeps the delete out of the partitions written
		// to now, which have no B-tree by task (see HistoryPartitionIndex).
		// A run that finished before the cutoff was created before it, so
		// runs_created bounds the scan.
		var r struct {
			N    int64      `bun:"n"`
			Last *time.Time `bun:"last_at"`
			ID   *int64     `bun:"last_id"`
		}
		// Without JIT: see RunListFiltered.
		err := s.withoutJIT(ctx, false, func(tx *Store) error {
			return tx.raw(`
WITH old AS (
	SELECT id, created_at FROM ?schema.runs
	WHERE created_at < now() - ? * interval '1 millisecond' AND (created_at, id) > (?::timestamptz, ?::bigint)
		AND finished_at < now() - ? * interval '1 millisecond'
		AND (unique_until IS NULL OR unique_until <= now())
	ORDER BY created_at, id LIMIT ?
), ot AS (
	SELECT ARRAY(SELECT unnest(r.task_ids) FROM ?schema.run_rows r WHERE r.id IN (SELECT id FROM old)) AS ids
), e AS (
	DELETE FROM ?schema.task_events WHERE at >= now() - ? * interval '1 millisecond'
		AND at < now() - ? * interval '1 millisecond' + interval '1 hour'
		AND task_id = ANY((SELECT ids FROM ot)::bigint[])
), ed AS (
	DELETE FROM ?schema.task_events_default WHERE at < now() - ? * interval '1 millisecond'
		AND task_id = ANY((SELECT ids FROM ot)::bigint[])
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
SELECT (SELECT count(*) FROM d) AS n, l.created_at AS last_at, l.id AS last_id
FROM (SELECT 1) one LEFT JOIN (SELECT created_at, id FROM old ORDER BY created_at DESC, id DESC LIMIT 1) l ON true`,
				olderThan.Milliseconds(), after.At, after.ID, olderThan.Milliseconds(), batch,
				olderThan.Milliseconds(), olderThan.Milliseconds(), olderThan.Milliseconds()).Scan(ctx, &r)
		})
		if err != nil {
			return total, fmt.Errorf("prune runs: %w", err)
		}
		total += r.N
		if r.N < int64(batch) || r.Last == nil || r.ID == nil {
			return total, nil
		}
		after = pruneCursor{At: *r.Last, ID: *r.ID}
	}
}

// pruneCursor is where RunPrune's next batch starts: after this run in
// (created_at, id) order.
type pruneCursor struct {
	At time.Time
	ID int64
}
