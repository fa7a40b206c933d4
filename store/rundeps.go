package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"
)

// ErrUnknownRun is returned by RunInsertMany when a run of After does not
// exist; the message names the ids.
var ErrUnknownRun = errors.New("unknown run")

// runDep is a run_deps row of a run being inserted: a run it waits for
// and, when that run had finished, its status.
type runDep struct {
	Run    int64   `json:"run"`
	Status *string `json:"status"`
}

// runDeps are the run_deps rows of one run being inserted and how many
// of them wait for a run that has not finished.
type runDeps struct {
	rows    []runDep
	pending int
}

// runInsertAfter is RunInsertMany for runs of which some wait for other
// runs (After), in one transaction. It locks the awaited runs' rows in id
// order and reads their status, marks those that have not finished as
// having waiters, and inserts the runs with their roots not_started,
// counting the runs they still wait for. A run that finishes concurrently
// is thus either seen finished here, or finishes after this commits (its
// update waits for the lock) and finds has_waiters set: the transaction
// that finishes it counts the new run down (see runDepsSettle). A run
// whose awaited runs have all finished already has its roots released
// here.
//
// Its locks, taken in id order, can still meet those of a transaction
// that takes them in another order (a finishing batch updates its runs'
// rows in the plan's order); PostgreSQL then breaks the deadlock by
// failing one of them. When the store owns the transaction it tries again
// (deadlockTries in all, backing off with jitter); in the caller's
// transaction the error (SQLSTATE 40P01) is the caller's to retry, as any
// serialization failure.
func (s *Store) runInsertAfter(ctx context.Context, ps []RunInsertParams) ([]RunInserted, error) {
	for try := 1; ; try++ {
		out, err := s.runInsertAfterOnce(ctx, ps)
		var pe *pq.Error
		if err == nil || s.inTx || try == deadlockTries || !errors.As(err, &pe) || pe.Code != deadlockDetected {
			return out, err
		}
		wait := time.Duration(try) * 20 * time.Millisecond
		wait += time.Duration(rand.Int64N(int64(wait)))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, fmt.Errorf("insert runs: %w (after a deadlock: %w)", ctx.Err(), err)
		}
	}
}

// deadlockTries is how many times runInsertAfter runs its transaction
// when PostgreSQL breaks a deadlock with it.
const deadlockTries = 4

// deadlockDetected is PostgreSQL's SQLSTATE for the transaction it failed
// to break a deadlock.
const deadlockDetected = "40P01"

func (s *Store) runInsertAfterOnce(ctx context.Context, ps []RunInsertParams) ([]RunInserted, error) {
	var ids []int64
	for _, p := range ps {
		ids = append(ids, p.After...)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	var out []RunInserted
	err := s.InTx(ctx, func(tx *Store) error {
		// A fast run awaited (see migration 019) becomes an ordinary
		// one first: its finish must write its row to see has_waiters.
		if err := tx.runMaterialize(ctx, ids); err != nil {
			return err
		}
		var locked []struct {
			ID     int64  `bun:"id"`
			Status string `bun:"status"`
		}
		if err := tx.raw(`SELECT id, status FROM ?schema.run_rows WHERE id = ANY(?::bigint[]) ORDER BY id FOR NO KEY UPDATE`,
			array(ids)).Scan(ctx, &locked); err != nil {
			return fmt.Errorf("lock awaited runs: %w", err)
		}
		status := make(map[int64]string, len(locked))
		var live []int64
		for _, r := range locked {
			status[r.ID] = r.Status
			if !RunIsFinished(r.Status) {
				live = append(live, r.ID)
			}
		}
		var unknown []string
		for _, id := range ids {
			if _, ok := status[id]; !ok {
				unknown = append(unknown, "#"+strconv.FormatInt(id, 10))
			}
		}
		if len(unknown) > 0 {
			return fmt.Errorf("after: %w %s", ErrUnknownRun, strings.Join(unknown, ", "))
		}
		if len(live) > 0 {
			if _, err := tx.exec(ctx, `UPDATE ?schema.run_rows SET has_waiters = true WHERE id = ANY(?::bigint[]) AND NOT has_waiters`,
				array(live)); err != nil {
				return fmt.Errorf("mark awaited runs: %w", err)
			}
		}
		deps := make([]runDeps, len(ps))
		for i, p := range ps {
			if len(p.After) == 0 {
				continue
			}
			after := slices.Clone(p.After)
			slices.Sort(after)
			for _, id := range slices.Compact(after) {
				d := runDep{Run: id}
				if st := status[id]; RunIsFinished(st) {
					d.Status = &st
				} else {
					deps[i].pending++
				}
				deps[i].rows = append(deps[i].rows, d)
			}
		}
		var err error
		if out, err = tx.runInsertMany(ctx, ps, deps); err != nil {
			return err
		}
		// Runs whose awaited runs have all finished: their roots are
		// released now.
		var ready []int64
		for i, r := range out {
			if !r.Existing && len(ps[i].After) > 0 && deps[i].pending == 0 {
				ready = append(ready, r.ID)
			}
		}
		if len(ready) == 0 {
			return nil
		}
		var roots []int64
		if err := tx.raw(`SELECT id FROM ?schema.tasks WHERE id = ANY(ARRAY(SELECT unnest(ti.task_ids) FROM ?schema.run_rows ti WHERE ti.id = ANY(?::bigint[]))) AND cardinality(deps) = 0
			AND status = 'not_started' AND pending_deps = 0 ORDER BY id`, array(ready)).Scan(ctx, &roots); err != nil {
			return fmt.Errorf("find roots to release: %w", err)
		}
		_, err = tx.releaseAll(ctx, roots, nil)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("insert runs: %w", err)
	}
	return out, nil
}

// runDepsSettleSQL counts down the roots of the runs waiting for runs
// that finished (argument: their ids, all locked by the caller's
// transaction). It records each finished run's status on its open edges,
// clears its has_waiters, and returns the roots counted down with what
// they still wait for.
var runDepsSettleSQL = `
WITH f AS (
	UPDATE ?schema.run_rows SET has_waiters = false
	WHERE id = ANY(?::bigint[]) AND has_waiters AND status IN ('completed', 'failed', 'cancelled')
	RETURNING id, status
), e AS (
	UPDATE ?schema.run_deps d SET status = f.status FROM f
	WHERE d.after_run_id = f.id AND d.status IS NULL
	RETURNING d.run_id
), n AS (
	SELECT run_id, count(*)::int AS n FROM e GROUP BY run_id
), l AS (
	SELECT t.id, n.n FROM n JOIN ?schema.run_rows rt ON rt.id = n.run_id JOIN ?schema.tasks t ON t.id = ANY(rt.task_ids)
	WHERE cardinality(t.deps) = 0 AND t.status = 'not_started'
	ORDER BY t.id
	FOR UPDATE OF t
)
UPDATE ?schema.tasks t SET pending_deps = t.pending_deps - l.n, updated_at = now()
FROM l WHERE t.id = l.id
RETURNING t.id, t.pending_deps`

// runDepsSettle counts down the roots of the runs that wait for runs,
// runs the caller's transaction just finished, and returns the roots that
// wait for nothing more: release decides them. Each waiting edge counts
// once, at the awaited run's first finish.
func (s *Store) runDepsSettle(ctx context.Context, runs []int64) ([]int64, error) {
	var rows []struct {
		ID      int64 `bun:"id"`
		Pending int   `bun:"pending_deps"`
	}
	if err := s.raw(runDepsSettleSQL, array(runs)).Scan(ctx, &rows); err != nil {
		return nil, fmt.Errorf("count down runs waiting for runs %v: %w", runs, err)
	}
	var out []int64
	for _, r := range rows {
		if r.Pending <= 0 {
			out = append(out, r.ID)
		}
	}
	return out, nil
}

// RunDep is a run another run waits for (see RunInsertParams.After).
type RunDep struct {
	AfterRunID int64 `bun:"after_run_id" json:"run"`
	// Status is the awaited run's final status once it finished (as the
	// waiting run's trigger rules saw it), else its current status; empty
	// when it was pruned.
	Status string `bun:"status" json:"status"`
	// Finished: the awaited run has finished and counted the waiting run
	// down.
	Finished bool `bun:"finished" json:"finished"`
}

// RunDepList returns the runs that run runID waits (or waited) for, in
// id order.
func (s *Store) RunDepList(ctx context.Context, runID int64) ([]RunDep, error) {
	var out []RunDep
	err := s.raw(`SELECT d.after_run_id, coalesce(d.status, r.status, '') AS status, d.status IS NOT NULL AS finished
		FROM ?schema.run_deps d LEFT JOIN ?schema.runs r ON r.id = d.after_run_id
		WHERE d.run_id = ? ORDER BY d.after_run_id`, runID).Scan(ctx, &out)
	if err != nil {
		return nil, fmt.Errorf("list runs run %d waits for: %w", runID, err)
	}
	return out, nil
}
