package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/check"
)

// Durable waits. Step journals a handler's side effects on the task; Sleep
// and AwaitSignal park the task deferred (without a slot, through
// DeferUntil's machinery) with what they wait for stored on its row. A
// later attempt of the task (after a crash, a shutdown or a retry) gets
// journaled steps back without running them again, and waits only for
// what is left: the wake time and the signal deadline are journaled too.
// Code outside steps runs again at every attempt, so it must be safe to.

const (
	// reservedStepPrefix starts the names of the engine's own journal
	// entries (waits); Step refuses it.
	reservedStepPrefix = "cairn:"
	// maxNameBytes bounds step and signal names.
	maxNameBytes = 200
	// maxSleepCheck is the longest a sleeping task goes without looking
	// at the clock (its timer is set for the wake time, this caps it).
	maxSleepCheck = time.Minute
	// signalRecheckPolls is how many poll intervals a signal wait goes
	// without looking for its signal when no NOTIFY wakes it.
	signalRecheckPolls = 10
)

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
	var zero T
	if err := checkLabel("step name", name); err != nil {
		return zero, err
	}
	if strings.HasPrefix(name, reservedStepPrefix) {
		return zero, fmt.Errorf("%w: step name %q: the prefix %q is reserved for the engine's waits", ErrInvalidInput, name, reservedStepPrefix)
	}
	if st, ok, err := t.journaled(ctx, name); err != nil {
		return zero, err
	} else if ok {
		var v T
		if err := json.Unmarshal(st.Result, &v); err != nil {
			return zero, fmt.Errorf("step %q: decode journaled result: %w", name, err)
		}
		return v, nil
	}
	v, err := fn(ctx)
	if err != nil {
		return zero, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return zero, fmt.Errorf("step %q: encode result: %w", name, err)
	}
	if err := store.CheckJSON(b); err != nil {
		return zero, fmt.Errorf("step %q: encode result: %w: result %w", name, ErrInvalidInput, err)
	}
	st, err := t.journal(ctx, name, b)
	if err != nil {
		return zero, err
	}
	if st.Attempt != t.ex.Task.Attempt {
		// Journaled meanwhile by another attempt (a race with its end):
		// the journal wins.
		var stored T
		if err := json.Unmarshal(st.Result, &stored); err != nil {
			return zero, fmt.Errorf("step %q: decode journaled result: %w", name, err)
		}
		return stored, nil
	}
	return v, nil
}

// checkLabel validates a step or signal name: 1 to maxNameBytes bytes of
// text.
func checkLabel(what, name string) error {
	if name == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidInput, what)
	}
	if len(name) > maxNameBytes {
		return fmt.Errorf("%w: %s is %d bytes long, limit %d", ErrInvalidInput, what, len(name), maxNameBytes)
	}
	if err := check.Text(name); err != nil {
		return fmt.Errorf("%w: %s %w", ErrInvalidInput, what, err)
	}
	return nil
}

// holder names this attempt for the journal's compare-and-set.
func (h *TaskHandle) holder() store.StepHolder {
	return store.StepHolder{TaskID: h.ex.Task.ID, WorkerID: h.ex.e.workerID, Attempt: h.ex.Task.Attempt}
}

// journaled returns the step journaled under name, loading the task's
// journal (one query) at first use. A first attempt has none: no earlier
// attempt could journal one, so nothing is read.
func (h *TaskHandle) journaled(ctx context.Context, name string) (store.Step, bool, error) {
	h.journalMu.Lock()
	defer h.journalMu.Unlock()
	if h.steps == nil {
		steps := map[string]store.Step{}
		if h.ex.Task.Attempt > 1 {
			list, err := h.ex.e.st.TaskStepList(ctx, h.ex.Task.ID)
			if err != nil {
				return store.Step{}, false, fmt.Errorf("load journaled steps: %w", err)
			}
			for _, s := range list {
				steps[s.Name] = s
			}
		}
		h.steps = steps
	}
	st, ok := h.steps[name]
	return st, ok, nil
}

// remember adds a step just journaled to the loaded journal.
func (h *TaskHandle) remember(st store.Step) {
	h.journalMu.Lock()
	defer h.journalMu.Unlock()
	if h.steps == nil {
		h.steps = map[string]store.Step{}
	}
	h.steps[st.Name] = st
}

// journal stores result under name (or returns the step journaled under
// it already).
func (h *TaskHandle) journal(ctx context.Context, name string, result json.RawMessage) (store.Step, error) {
	st, err := h.ex.e.st.TaskStepSave(ctx, h.holder(), name, result)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return store.Step{}, fmt.Errorf("journal step %q: %w", name, ErrTaskLost)
		}
		// The heartbeat may find the task lost first and cancel the
		// handler mid-write: the same loss, found another way.
		if cause := context.Cause(ctx); errors.Is(cause, ErrTaskLost) {
			return store.Step{}, fmt.Errorf("journal step %q: %w", name, cause)
		}
		return store.Step{}, err
	}
	h.remember(*st)
	return *st, nil
}

// journalOnce returns the step journaled under name, journaling make()'s
// result first when there is none.
func (h *TaskHandle) journalOnce(ctx context.Context, name string, value func() any) (store.Step, error) {
	if st, ok, err := h.journaled(ctx, name); err != nil || ok {
		return st, err
	}
	b, err := json.Marshal(value())
	if err != nil {
		return store.Step{}, fmt.Errorf("encode %s: %w", name, err)
	}
	return h.journal(ctx, name, b)
}

// nextWait numbers the durable waits of one kind in the order this
// attempt begins them: a replay finds the journal of each by its number.
func (h *TaskHandle) nextWait(kind string) string {
	h.journalMu.Lock()
	defer h.journalMu.Unlock()
	if h.waits == nil {
		h.waits = map[string]int{}
	}
	h.waits[kind]++
	return fmt.Sprintf("%s%s#%d", reservedStepPrefix, kind, h.waits[kind])
}

// waitUntil is the journal entry of a wait's wake time or deadline.
type waitUntil struct {
	Until *time.Time `json:"until"`
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
	name := h.nextWait(store.WaitKindSleep)
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	clock := h.ex.e.cfg.Clock
	st, err := h.journalOnce(ctx, name, func() any { until := clock().Add(d); return waitUntil{Until: &until} })
	if err != nil {
		return fmt.Errorf("sleep: %w", err)
	}
	var w waitUntil
	if err := json.Unmarshal(st.Result, &w); err != nil || w.Until == nil {
		return fmt.Errorf("sleep: decode journaled wake time %s: %v", st.Result, err)
	}
	until := *w.Until
	left := func(ctx context.Context) (bool, time.Duration, error) {
		l := until.Sub(clock())
		if l <= 0 {
			return true, 0, nil
		}
		return false, max(min(l, maxSleepCheck), time.Millisecond), nil
	}
	done, every, _ := left(ctx)
	if done {
		return nil
	}
	wait := &store.Wait{Kind: store.WaitKindSleep, Until: &until, Since: st.At}
	if err := h.park(ctx, wait, every, left); err != nil {
		return fmt.Errorf("sleep: %w", err)
	}
	return nil
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
	key := h.nextWait(store.WaitKindSignal)
	if err := checkLabel("signal name", name); err != nil {
		return nil, err
	}
	if timeout < 0 {
		return nil, fmt.Errorf("%w: signal %q: timeout must not be negative, got %s", ErrInvalidInput, name, timeout)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if st, ok, err := h.journaled(ctx, key); err != nil {
		return nil, err
	} else if ok {
		return signalResult(name, st)
	}
	// A signal sent before the wait is taken at once, with no wait
	// journaled.
	if st, err := h.takeSignal(ctx, name, key, false); err != nil || st != nil {
		return h.signalOutcome(name, st, err)
	}
	e, clock := h.ex.e, h.ex.e.cfg.Clock
	begun, err := h.journalOnce(ctx, key+"/wait", func() any {
		if timeout == 0 {
			return waitUntil{}
		}
		until := clock().Add(timeout)
		return waitUntil{Until: &until}
	})
	if err != nil {
		return nil, fmt.Errorf("await signal %q: %w", name, err)
	}
	var w waitUntil
	if err := json.Unmarshal(begun.Result, &w); err != nil {
		return nil, fmt.Errorf("await signal %q: decode journaled deadline %s: %w", name, begun.Result, err)
	}
	recheck := signalRecheckPolls * e.cfg.PollInterval
	next := func() time.Duration {
		if w.Until == nil {
			return recheck
		}
		return max(min(w.Until.Sub(clock()), recheck), time.Millisecond)
	}
	expired := func() bool { return w.Until != nil && !clock().Before(*w.Until) }
	if expired() {
		st, err := h.takeSignal(ctx, name, key, true)
		return h.signalOutcome(name, st, err)
	}
	var got *store.Step
	check := func(ctx context.Context) (bool, time.Duration, error) {
		st, err := h.takeSignal(ctx, name, key, expired())
		switch {
		case errors.Is(err, ErrTaskLost):
			return false, 0, err
		case err != nil:
			// The database failed: look again at the next interval.
			e.log.WarnContext(ctx, "look for a signal", slog.Int64("task", h.ex.Task.ID), slog.String("signal", name),
				slog.Any("error", err))
			return false, next(), nil
		case st != nil:
			got = st
			return true, 0, nil
		}
		return false, next(), nil
	}
	wait := &store.Wait{Kind: store.WaitKindSignal, Name: name, Until: w.Until, Since: begun.At}
	if err := h.park(ctx, wait, next(), check); err != nil {
		return nil, fmt.Errorf("await signal %q: %w", name, err)
	}
	return h.signalOutcome(name, got, nil)
}

// takeSignal takes the oldest pending signal named name and journals it
// under key (or a timeout, when timeout says so); nil when none is there.
func (h *TaskHandle) takeSignal(ctx context.Context, name, key string, timeout bool) (*store.Step, error) {
	st, err := h.ex.e.st.TaskSignalTake(ctx, store.SignalTakeParams{StepHolder: h.holder(), Name: name, Step: key, Timeout: timeout})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("await signal %q: %w", name, ErrTaskLost)
		}
		return nil, err
	}
	if st != nil {
		h.remember(*st)
	}
	return st, nil
}

// signalOutcome is AwaitSignal's answer for a journaled result.
func (h *TaskHandle) signalOutcome(name string, st *store.Step, err error) (json.RawMessage, error) {
	if err != nil {
		return nil, err
	}
	return signalResult(name, *st)
}

// signalResult decodes a journaled signal wait: the payload, or
// ErrWaitTimeout.
func signalResult(name string, st store.Step) (json.RawMessage, error) {
	var r store.SignalResult
	if err := json.Unmarshal(st.Result, &r); err != nil {
		return nil, fmt.Errorf("await signal %q: decode journaled result: %w", name, err)
	}
	if r.Timeout {
		return nil, fmt.Errorf("signal %q: %w", name, ErrWaitTimeout)
	}
	if len(r.Payload) == 0 {
		return json.RawMessage("null"), nil
	}
	return r.Payload, nil
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
	if err := checkLabel("signal name", name); err != nil {
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
