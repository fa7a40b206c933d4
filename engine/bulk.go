package engine

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cairnhq/cairn/engine/internal/bulk"
	"github.com/cairnhq/cairn/engine/internal/telemetry"
	"github.com/cairnhq/cairn/store"
)

// BulkBatch is how many runs one transaction of CancelRuns, RetryRuns,
// RequeueRuns or DeleteRuns handles; more are handled batch after batch.
const BulkBatch = 500

// BulkResult is the outcome of an action on many runs.
type BulkResult struct {
	// Done are the runs the action changed, in id order.
	Done []int64
	// Skipped are the other runs asked for, in id order: unknown ones and
	// those in no state the action applies to (see each action).
	Skipped []int64
}

// batches calls fn with ids BulkBatch at a time (see bulk.Batches) and
// logs the admin action name once it succeeded.
func (e *Engine) batches(ctx context.Context, name string, ids []int64, fn func(batch []int64) ([]int64, error)) (BulkResult, error) {
	res, err := bulk.Batches(ids, BulkBatch, fn)
	e.audit(ctx, &err, name, slog.Int("runs", len(ids)), slog.Int("done", len(res.Done)), slog.Int("skipped", len(res.Skipped)))
	return BulkResult(res), err
}

// oneRun applies action to one run; a run it leaves alone is refused
// with ErrInvalidState, saying why (refused).
func (e *Engine) oneRun(ctx context.Context, runID int64, action func(context.Context, []int64) (BulkResult, error), refused string) error {
	res, err := action(ctx, []int64{runID})
	if err != nil || len(res.Done) > 0 {
		return e.mapErr(fmt.Sprintf("run %d", runID), err)
	}
	run, err := e.st.RunGet(ctx, runID)
	if err != nil {
		return e.mapErr(fmt.Sprintf("run %d", runID), err)
	}
	return fmt.Errorf("%w: run %d is %s and %s", ErrInvalidState, runID, run.Status, refused)
}

// CancelRuns cancels the unfinished tasks of the given runs, as CancelRun
// does for one: one transaction per BulkBatch runs (events and NOTIFY as
// for CancelRun; running handlers see their context cancelled), then the
// unfinished runs their tasks spawned. Finished and unknown runs are
// skipped. On an error, the batches before it stay done.
func (e *Engine) CancelRuns(ctx context.Context, runIDs []int64) (BulkResult, error) {
	return e.batches(ctx, "cancel_runs", runIDs, func(batch []int64) ([]int64, error) {
		refs, err := e.st.TaskRefListByRunsStatuses(ctx, batch, liveStates)
		if err != nil {
			return nil, fmt.Errorf("cancel runs: %w", err)
		}
		ids := make([]int64, len(refs))
		runOf := make(map[int64]int64, len(refs))
		for i, t := range refs {
			ids[i], runOf[t.ID] = t.ID, t.RunID
		}
		moved, err := e.cancelTree(ctx, ids, "run cancelled")
		if err != nil {
			return nil, fmt.Errorf("cancel runs: %w", err)
		}
		for i, id := range moved {
			moved[i] = runOf[id]
		}
		return bulk.Distinct(moved), nil
	})
}

// RetryRuns retries whole runs: every failed or cancelled task, and the
// tasks skipped below it, start over so that the run's DAG reruns from
// them (see store.RunRetry): one transaction per BulkBatch runs, with an
// event per task and NOTIFY as for RetryTask. Runs with no failed or
// cancelled task, and unknown runs, are skipped. On an error, the
// batches before it stay done.
func (e *Engine) RetryRuns(ctx context.Context, runIDs []int64) (BulkResult, error) {
	detail := actionDetail(ctx, "run retried")
	return e.batches(ctx, "retry_runs", runIDs, func(batch []int64) ([]int64, error) {
		moved, runs, err := e.st.RunRetry(ctx, &store.RunRetryParams{RunIDs: batch, Detail: detail})
		if err != nil {
			return nil, err
		}
		telemetry.CountMoves(moved)
		return runs, nil
	})
}

// RequeueRuns requeues whole runs: every interrupted task of each run
// goes back to ready, as RequeueTask sends one: one transaction per
// BulkBatch runs, with an event per task and NOTIFY. Runs with no
// interrupted task, and unknown runs, are skipped (RetryRuns leaves
// interrupted tasks alone: they are requeued, not retried). On an error,
// the batches before it stay done.
func (e *Engine) RequeueRuns(ctx context.Context, runIDs []int64) (BulkResult, error) {
	detail := actionDetail(ctx, "run requeued")
	return e.batches(ctx, "requeue_runs", runIDs, func(batch []int64) ([]int64, error) {
		refs, err := e.st.TaskRefListByRunsStatuses(ctx, batch, []string{store.StatusInterrupted})
		if err != nil {
			return nil, fmt.Errorf("requeue runs: %w", err)
		}
		if len(refs) == 0 {
			return nil, nil
		}
		items := make([]store.TransitionItem, len(refs))
		for i, t := range refs {
			items[i] = store.TransitionItem{TaskID: t.ID, To: store.StatusReady, Detail: detail}
		}
		moved, released, err := e.st.TransitionAll(ctx, store.TransitionParams{From: []string{store.StatusInterrupted}, Items: items})
		if err != nil {
			return nil, fmt.Errorf("requeue runs: %w", err)
		}
		telemetry.CountMoves(moved, released)
		runs := make([]int64, len(moved))
		for i, m := range moved {
			runs[i] = m.RunID
		}
		return bulk.Distinct(runs), nil
	})
}

// RequeueRun requeues every interrupted task of one run (see
// RequeueRuns). A run with no interrupted task is refused with
// ErrInvalidState.
func (e *Engine) RequeueRun(ctx context.Context, runID int64) error {
	return e.oneRun(ctx, runID, e.RequeueRuns, "has no interrupted task to requeue")
}

// RetryRun retries one whole run (see RetryRuns). A run with no failed or
// cancelled task is refused with ErrInvalidState.
func (e *Engine) RetryRun(ctx context.Context, runID int64) error {
	return e.oneRun(ctx, runID, e.RetryRuns, "has no failed or cancelled task to retry")
}

// DeleteRuns deletes the given runs that have finished (completed, failed
// or cancelled), with their tasks and history: one statement per
// BulkBatch runs. Unfinished and unknown runs are skipped. A deleted
// run's idempotency key is free again, even within its UniqueFor window.
func (e *Engine) DeleteRuns(ctx context.Context, runIDs []int64) (BulkResult, error) {
	return e.batches(ctx, "delete_runs", runIDs, func(batch []int64) ([]int64, error) {
		return e.st.RunDeleteFinished(ctx, batch)
	})
}
