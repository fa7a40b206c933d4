package cron

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/store"
)

// Resume lets the paused schedule name fire again, in one transaction:
// its next fire is computed from the clock's now, so fires due while it
// was paused are dropped. A schedule that is not paused is left alone. A
// stored expression Parse refuses is its *FieldError.
func Resume(ctx context.Context, st Store, name string, clock func() time.Time) error {
	return st.InTx(ctx, func(tx *store.Store) error {
		sc, err := tx.ScheduleLock(ctx, name)
		if err != nil {
			return err
		}
		if !sc.Paused {
			return nil
		}
		spec, err := Parse(sc.Expression, sc.Timezone)
		if err != nil {
			return err
		}
		next, err := spec.First(clock())
		if err != nil {
			return err
		}
		return tx.ScheduleSetPaused(ctx, &store.ScheduleSetPausedParams{Name: name, NextFireAt: &next})
	})
}

// FireByHand enqueues a run of the schedule name now (the clock's), also
// when it is paused, with the idempotency key
// "schedule:<id>:manual:<unix nanoseconds>", and records it as the
// schedule's last fire, in one transaction; its next fire does not
// change. It returns the schedule's workflow and the run.
func FireByHand(ctx context.Context, st Store, name string, clock func() time.Time, enqueue EnqueueFunc, log *slog.Logger) (workflow string, run Run, err error) {
	err = st.InTx(ctx, func(tx *store.Store) error {
		sc, err := tx.ScheduleLock(ctx, name)
		if err != nil {
			return err
		}
		now := clock()
		key := fmt.Sprintf("schedule:%d:manual:%d", sc.ID, now.UnixNano())
		runs, err := enqueue(ctx, tx, []Fire{{Workflow: sc.Workflow, Input: sc.Input, Key: key}})
		if err != nil {
			return err
		}
		workflow, run = sc.Workflow, runs[0]
		if err := tx.ScheduleRecordFire(ctx, &store.ScheduleRecordFireParams{ID: sc.ID, At: now, RunID: run.ID}); err != nil {
			return err
		}
		log.InfoContext(ctx, "schedule fired by hand", slog.String("schedule", sc.Name), slog.Int64("schedule_id", sc.ID),
			slog.Int64("run", run.ID), slog.String("key", key))
		return nil
	})
	return workflow, run, err
}
