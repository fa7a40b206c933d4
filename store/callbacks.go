package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// This file holds callback URLs (callbacks, migration 033): single-use
// tokens that deliver a signal to a task, stored by the SHA-256 of the
// token (the caller hashes it).

// Why a callback is refused, besides ErrNotFound (no such token).
var (
	// ErrCallbackExpired: the callback's expiry has passed.
	ErrCallbackExpired = errors.New("callback expired")
	// ErrCallbackUsed: the callback delivered its signal already.
	ErrCallbackUsed = errors.New("callback already used")
	// ErrCallbackMovedOn: the task finished, or a signal of the callback's
	// name was sent to it since the callback was minted (the wait it was
	// minted for is answered).
	ErrCallbackMovedOn = errors.New("task moved on")
)

// Callback is a row of callbacks.
type Callback struct {
	TaskID    int64      `bun:"task_id"`
	Attempt   int        `bun:"attempt"`
	Name      string     `bun:"name"`
	CreatedAt time.Time  `bun:"created_at"`
	ExpiresAt time.Time  `bun:"expires_at"`
	UsedAt    *time.Time `bun:"used_at"`
	UsedBy    *string    `bun:"used_by"`
	// Expired is whether expires_at has passed, by the database clock.
	Expired bool `bun:"expired"`
}

// CallbackInsert stores a callback for the signal name of the holder's
// task, expiring ttl from now (database clock), and returns its expiry.
// It writes nothing and returns ErrNotFound when the task is no longer the
// holder's (cancelled, rescued, another attempt).
func (s *Store) CallbackInsert(ctx context.Context, h StepHolder, tokenHash []byte, name string, ttl time.Duration) (time.Time, error) {
	var at time.Time
	err := s.InTx(ctx, func(tx *Store) error {
		if err := tx.lockHeld(ctx, h); err != nil {
			return err
		}
		return tx.raw(`INSERT INTO ?schema.callbacks (token_hash, task_id, attempt, name, expires_at)
			VALUES (?, ?, ?, ?, now() + ? * interval '1 microsecond') RETURNING expires_at`,
			tokenHash, h.TaskID, h.Attempt, name, ttl.Microseconds()).Scan(ctx, &at)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("mint callback %q of task %d: %w", name, h.TaskID, err)
	}
	return at, nil
}

// CallbackUse delivers payload through the callback of tokenHash, in one
// transaction: it marks the callback used by addr and stores the signal
// (as SignalSend, which wakes the task at commit). Refused, with nothing
// written: ErrNotFound (no such token), ErrCallbackUsed,
// ErrCallbackExpired, ErrCallbackMovedOn. It returns the callback as it
// was before the use.
func (s *Store) CallbackUse(ctx context.Context, tokenHash []byte, addr string, payload json.RawMessage) (*Callback, error) {
	var cb Callback
	err := s.InTx(ctx, func(tx *Store) error {
		if err := tx.raw(`SELECT task_id, attempt, name, created_at, expires_at, used_at, used_by, expires_at <= now() AS expired
			FROM ?schema.callbacks WHERE token_hash = ? FOR UPDATE`, tokenHash).Scan(ctx, &cb); err != nil {
			return notFound(err)
		}
		switch {
		case cb.UsedAt != nil:
			return fmt.Errorf("%w: at %s by %s", ErrCallbackUsed, cb.UsedAt.UTC().Format(time.RFC3339), *cb.UsedBy)
		case cb.Expired:
			return fmt.Errorf("%w at %s", ErrCallbackExpired, cb.ExpiresAt.UTC().Format(time.RFC3339))
		}
		// The task row's lock makes uses of two callbacks of one task take
		// turns, so the second sees the first's signal.
		var status []string
		if err := tx.raw(`SELECT status FROM ?schema.tasks WHERE id = ? FOR NO KEY UPDATE`, cb.TaskID).Scan(ctx, &status); err != nil {
			return err
		}
		if len(status) == 0 || IsDone(status[0]) {
			return fmt.Errorf("%w: task %d is finished", ErrCallbackMovedOn, cb.TaskID)
		}
		var answered bool
		if err := tx.raw(`SELECT EXISTS (SELECT 1 FROM ?schema.task_signals WHERE task_id = ? AND name = ? AND sent_at >= ?)`,
			cb.TaskID, cb.Name, cb.CreatedAt).Scan(ctx, &answered); err != nil {
			return err
		}
		if answered {
			return fmt.Errorf("%w: task %d got a signal %q since the callback was minted", ErrCallbackMovedOn, cb.TaskID, cb.Name)
		}
		if _, err := tx.exec(ctx, `UPDATE ?schema.callbacks SET used_at = now(), used_by = ? WHERE token_hash = ?`, addr, tokenHash); err != nil {
			return err
		}
		_, err := tx.SignalSend(ctx, cb.TaskID, cb.Name, payload)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("use callback: %w", err)
	}
	return &cb, nil
}
