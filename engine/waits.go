package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/engine/internal/callback"
	"github.com/cairnhq/cairn/engine/internal/journal"
	"github.com/cairnhq/cairn/store"
)

// Durable waits. Step journals a handler's side effects on the task; Sleep
// and AwaitSignal park the task deferred (without a slot, through
// DeferUntil's machinery) with what they wait for stored on its row. A
// later attempt of the task (after a crash, a shutdown or a retry) gets
// journaled steps back without running them again, and waits only for
// what is left: the wake time and the signal deadline are journaled too.
// Code outside steps runs again at every attempt, so it must be safe to.

// Step runs fn once for the task and journals its result (as JSON) under
// name, in a transaction that checks that the task is still this
// attempt's. On any later attempt of the task (after a crash, a shutdown
// or a retry) Step returns the journaled result without calling fn. A
// failed fn journals nothing and its error is returned as it is. Names are
// unique within a task: a second Step of the same name returns the first
// one's result. A task taken from this worker meanwhile (cancelled,
// rescued) gets ErrTaskLost and nothing is journaled.
//
// Code outside steps runs again on every attempt and must be safe to run
// again; fn itself may run again if the process dies after it returns
// and before its result is journaled.
func Step[T any](ctx context.Context, t *TaskHandle, name string, fn func(context.Context) (T, error)) (T, error) {
	return journal.Step(ctx, t.steps(), name, fn)
}

// Sleep parks the task for d without holding a slot, durably: its wake
// time is journaled and stored on the row (see cairn_durable_waits), the
// row goes running -> deferred, and back to running (slot re-acquired)
// once the time has come. If the process dies or shuts down meanwhile,
// the task goes back to ready, whatever RequeueOnInterrupt says, and its
// next attempt (replaying its journaled steps) sleeps only what is left
// of the same wake time. Sleeps are told apart by the order the handler
// calls them in. It returns ctx's error if the task is cancelled or the
// engine shuts down meanwhile.
func (h *TaskHandle) Sleep(ctx context.Context, d time.Duration) error {
	return h.steps().Sleep(ctx, d, h.park)
}

// AwaitSignal waits for a signal named name sent to this task with
// Engine.SendSignal and returns its payload. It takes the oldest signal of
// that name not taken yet (one sent before the call is kept for it) and
// journals it in the same transaction, so each signal is taken once and a
// later attempt gets the same payload back. While none is there the task
// is parked without a slot, as Sleep parks it; a timeout (0: none) ends
// the wait with ErrWaitTimeout, and its deadline is journaled, so a later
// attempt keeps the first one's. Waits are told apart by the order the
// handler calls AwaitSignal in. It returns ctx's error if the task is
// cancelled or the engine shuts down meanwhile.
func (h *TaskHandle) AwaitSignal(ctx context.Context, name string, timeout time.Duration) (json.RawMessage, error) {
	return h.steps().AwaitSignal(ctx, name, timeout, h.park)
}

// SendSignal stores a signal named name with payload (marshalled to JSON;
// nil is null) for the task and wakes it if it waits in AwaitSignal, in
// whichever process holds it. The signal is kept until an AwaitSignal of
// its name takes it, so one sent before the task waits is not lost; each
// is taken once. Refused: an unknown task (ErrNotFound), a finished one
// (ErrInvalidState), an empty name or a payload that is not storable JSON
// (ErrInvalidInput), one larger than Config.MaxInputBytes
// (ErrInputTooLarge).
func (e *Engine) SendSignal(ctx context.Context, taskID int64, name string, payload any) (err error) {
	defer e.audit(ctx, &err, "send_signal", slog.Int64("task", taskID), slog.String("signal", name))
	if err := journalErrs.CheckLabel("signal name", name); err != nil {
		return err
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("%w: signal payload: %v", ErrInvalidInput, err)
	}
	if err := store.CheckJSON(b); err != nil {
		return fmt.Errorf("%w: signal payload %w", ErrInvalidInput, err)
	}
	if len(b) > e.cfg.MaxInputBytes {
		return fmt.Errorf("%w: signal payload: %d bytes, limit %d", ErrInputTooLarge, len(b), e.cfg.MaxInputBytes)
	}
	if _, err := e.st.SignalSend(ctx, taskID, name, b); err != nil {
		if errors.Is(err, store.ErrTaskFinished) {
			return fmt.Errorf("%w: %w; only an unfinished task can be signalled", ErrInvalidState, err)
		}
		return e.mapErr(fmt.Sprintf("task %d", taskID), err)
	}
	e.signalLocal(taskID) // the NOTIFY wakes it elsewhere; here at once
	return nil
}

// CallbackURL mints a new single-use URL, valid for ttl, whose POSTed
// JSON is sent as the signal name (README: "Callback URLs").
func (h *TaskHandle) CallbackURL(ctx context.Context, name string, ttl time.Duration) (string, error) {
	return callback.Mint(ctx, h.ex.e.st, h.holder(), h.ex.e.cfg.CallbackBaseURL, name, ttl, journalErrs)
}

// UseCallback sends payload through a callback URL's token and returns
// the task's id: ErrNotFound when unknown or expired, ErrInvalidState
// when used or the task moved on.
func (e *Engine) UseCallback(ctx context.Context, token string, payload json.RawMessage) (int64, error) {
	errs := callback.Errors{Errors: journalErrs, TooLarge: ErrInputTooLarge, InvalidState: ErrInvalidState}
	return callback.Use(ctx, e.st, token, payload, e.cfg.MaxInputBytes, actorOf(ctx).Addr, e.signalLocal, errs)
}
