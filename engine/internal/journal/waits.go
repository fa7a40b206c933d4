package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cairnhq/cairn/store"
)

const (
	// maxSleepCheck is the longest a sleeping task goes without looking
	// at the clock (its timer is set for the wake time, this caps it).
	maxSleepCheck = time.Minute
	// signalRecheckPolls is how many poll intervals a signal or runs wait
	// goes without looking when no NOTIFY wakes it.
	signalRecheckPolls = 10
)

// Park parks the task in the durable wait (stored on its row) until check
// reports done: check runs after every (its last answer's interval after
// that) and at every signal. It is the engine's TaskHandle.park.
type Park func(ctx context.Context, wait *store.Wait, every time.Duration,
	check func(context.Context) (done bool, next time.Duration, err error)) error

// waitUntil is the journal entry of a wait's wake time or deadline.
type waitUntil struct {
	Until *time.Time `json:"until"`
}

// Sleep parks the task for d, durably: its wake time is journaled (a
// later attempt keeps the first one's) and stored on the row.
func (j *Journal) Sleep(ctx context.Context, d time.Duration, park Park) error {
	name := j.nextWait(store.WaitKindSleep)
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	clock := j.cfg.Clock
	st, err := j.once(ctx, name, func() any { until := clock().Add(d); return waitUntil{Until: &until} })
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
	if err := park(ctx, wait, every, left); err != nil {
		return fmt.Errorf("sleep: %w", err)
	}
	return nil
}

// AwaitSignal takes the oldest signal named name not taken yet, journaled
// in the same transaction, parking the task while none is there; a
// timeout (0: none) ends the wait with Errors.WaitTimeout, its deadline
// journaled.
func (j *Journal) AwaitSignal(ctx context.Context, name string, timeout time.Duration, park Park) (json.RawMessage, error) {
	key := j.nextWait(store.WaitKindSignal)
	if err := j.cfg.CheckLabel("signal name", name); err != nil {
		return nil, err
	}
	if timeout < 0 {
		return nil, fmt.Errorf("%w: signal %q: timeout must not be negative, got %s", j.cfg.InvalidInput, name, timeout)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if st, ok, err := j.Journaled(ctx, key); err != nil {
		return nil, err
	} else if ok {
		return j.signalResult(name, st)
	}
	// A signal sent before the wait is taken at once, with no wait
	// journaled.
	if st, err := j.takeSignal(ctx, name, key, false); err != nil || st != nil {
		return j.signalOutcome(name, st, err)
	}
	clock := j.cfg.Clock
	begun, err := j.once(ctx, key+"/wait", func() any {
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
	recheck := signalRecheckPolls * j.cfg.PollInterval
	next := func() time.Duration {
		if w.Until == nil {
			return recheck
		}
		return max(min(w.Until.Sub(clock()), recheck), time.Millisecond)
	}
	expired := func() bool { return w.Until != nil && !clock().Before(*w.Until) }
	if expired() {
		st, err := j.takeSignal(ctx, name, key, true)
		return j.signalOutcome(name, st, err)
	}
	var got *store.Step
	check := func(ctx context.Context) (bool, time.Duration, error) {
		st, err := j.takeSignal(ctx, name, key, expired())
		switch {
		case errors.Is(err, j.cfg.TaskLost):
			return false, 0, err
		case err != nil:
			// The database failed: look again at the next interval.
			j.cfg.Log.WarnContext(ctx, "look for a signal", slog.Int64("task", j.cfg.Holder.TaskID), slog.String("signal", name),
				slog.Any("error", err))
			return false, next(), nil
		case st != nil:
			got = st
			return true, 0, nil
		}
		return false, next(), nil
	}
	wait := &store.Wait{Kind: store.WaitKindSignal, Name: name, Until: w.Until, Since: begun.At}
	if err := park(ctx, wait, next(), check); err != nil {
		return nil, fmt.Errorf("await signal %q: %w", name, err)
	}
	return j.signalOutcome(name, got, nil)
}

// takeSignal takes the oldest pending signal named name and journals it
// under key (or a timeout, when timeout says so); nil when none is there.
func (j *Journal) takeSignal(ctx context.Context, name, key string, timeout bool) (*store.Step, error) {
	st, err := j.cfg.Store.TaskSignalTake(ctx, store.SignalTakeParams{StepHolder: j.cfg.Holder, Name: name, Step: key, Timeout: timeout})
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("await signal %q: %w", name, j.cfg.TaskLost)
		}
		return nil, err
	}
	if st != nil {
		j.remember(*st)
	}
	return st, nil
}

// signalOutcome is AwaitSignal's answer for a journaled result.
func (j *Journal) signalOutcome(name string, st *store.Step, err error) (json.RawMessage, error) {
	if err != nil {
		return nil, err
	}
	return j.signalResult(name, *st)
}

// signalResult decodes a journaled signal wait: the payload, or
// Errors.WaitTimeout.
func (j *Journal) signalResult(name string, st store.Step) (json.RawMessage, error) {
	var r store.SignalResult
	if err := json.Unmarshal(st.Result, &r); err != nil {
		return nil, fmt.Errorf("await signal %q: decode journaled result: %w", name, err)
	}
	if r.Timeout {
		return nil, fmt.Errorf("signal %q: %w", name, j.cfg.WaitTimeout)
	}
	if len(r.Payload) == 0 {
		return json.RawMessage("null"), nil
	}
	return r.Payload, nil
}

// AwaitRuns waits until every run of ids has finished, parking the task
// while any is unfinished (the wait journaled), and returns each one's
// outcome with its outputs, in the order of ids. An unknown run gets
// Errors.NotFound.
func (j *Journal) AwaitRuns(ctx context.Context, ids []int64, park Park) ([]store.RunOutcome, error) {
	key := j.nextWait(store.WaitKindRuns)
	for _, id := range ids {
		if id <= 0 {
			return nil, fmt.Errorf("%w: await runs: run id %d must be positive", j.cfg.InvalidInput, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var runs []store.RunOutcome
	finished := func(ctx context.Context) (bool, error) {
		list, err := j.cfg.Store.RunStatusList(ctx, ids)
		if err != nil {
			return false, err
		}
		for _, r := range list {
			if !store.RunIsFinished(r.Status) {
				return false, nil
			}
		}
		runs = list
		return true, nil
	}
	done, err := finished(ctx)
	if err != nil {
		return nil, j.cfg.mapErr("await runs", err)
	}
	if !done {
		begun, err := j.once(ctx, key, func() any { return waitUntil{} })
		if err != nil {
			return nil, fmt.Errorf("await runs: %w", err)
		}
		recheck := signalRecheckPolls * j.cfg.PollInterval
		check := func(ctx context.Context) (bool, time.Duration, error) {
			done, err := finished(ctx)
			if errors.Is(err, store.ErrNotFound) {
				return false, 0, j.cfg.mapErr("await runs", err) // pruned or deleted meanwhile
			}
			if err != nil {
				// The database failed: look again at the next interval.
				j.cfg.Log.WarnContext(ctx, "look at awaited runs", slog.Int64("task", j.cfg.Holder.TaskID), slog.Any("error", err))
				return false, recheck, nil
			}
			return done, recheck, nil
		}
		wait := &store.Wait{Kind: store.WaitKindRuns, Name: fmt.Sprintf("%d runs", len(ids)), Since: begun.At}
		if err := park(ctx, wait, recheck, check); err != nil {
			return nil, fmt.Errorf("await runs: %w", err)
		}
	}
	if err := j.cfg.Store.RunOutputList(ctx, runs); err != nil {
		return nil, fmt.Errorf("await runs: %w", err)
	}
	return runs, nil
}
