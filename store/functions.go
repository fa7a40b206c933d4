package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/lib/pq"
)

// This file holds what the store shares with the SQL API, the functions
// of the engine's schema (migration 035; README, "Cairn from other
// languages"): the store calls run_insert, run_debounce, task_transition,
// cancel_tree and signal_insert (sql/functions.sql) and settles what a
// cancel_run from SQL left to the engine (PendingSettleTake).

// The SQLSTATEs the functions raise.
const (
	stateInvalid  = "22023" // invalid_parameter_value: bad input
	stateTooLarge = "54000" // program_limit_exceeded: input over the limit
	stateUnknown  = "P0002" // no_data_found: unknown workflow, run or task
	stateFinished = "55000" // object_not_in_prerequisite_state: the run or task has finished
)

// raised turns the error a function raised into the store's: ErrNotFound
// for an unknown row, ErrTaskFinished for a finished task, ErrInvalidValue
// for bad input, with the function's message.
func raised(err error) error {
	var pe *pq.Error
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case stateUnknown:
		return fmt.Errorf("%w: %s", ErrNotFound, pe.Message)
	case stateFinished:
		return fmt.Errorf("%w: %s", ErrTaskFinished, pe.Message)
	case stateInvalid, stateTooLarge:
		return fmt.Errorf("%w: %s", ErrInvalidValue, pe.Message)
	}
	return err
}

// PendingSettleTake decides, in one transaction, what up to limit
// cancels from SQL (cancel_run) left to an engine: the runs they finished
// that other runs wait for (WithAfter), whose roots' trigger rules are
// evaluated here (see release), and the dependents they unblocked. Rows
// another engine is taking are skipped. It returns the moves and how many
// rows it took.
func (s *Store) PendingSettleTake(ctx context.Context, limit int) (moved []Moved, taken int, err error) {
	err = s.InTx(ctx, func(tx *Store) error {
		var rows []struct {
			Unblocked []int64 `bun:"unblocked,array"`
			Settle    []int64 `bun:"settle,array"`
		}
		if err := tx.raw(`DELETE FROM ?schema.pending_settles WHERE id = ANY(ARRAY(
	SELECT id FROM ?schema.pending_settles ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED))
RETURNING unblocked, settle`, limit).Scan(ctx, &rows); err != nil {
			return err
		}
		taken = len(rows)
		var unblocked, settle []int64
		for _, r := range rows {
			unblocked, settle = append(unblocked, r.Unblocked...), append(settle, r.Settle...)
		}
		var err error
		moved, err = tx.releaseAll(ctx, unblocked, settle)
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("settle what cancels from SQL left: %w", err)
	}
	return moved, taken, nil
}
