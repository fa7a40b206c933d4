// Package outcome is the engine's vocabulary of task outcomes: one named
// constructor for every kind of transition item the engine writes
// (completed, retry, failed, interrupted, rescued, released, parked,
// resumed), and the two rules that pick between them — the
// interrupt rule (what becomes of a held task whose handler is stopped
// by a shutdown or whose worker died) and the retry rule (whether a failed
// attempt gets another, and after how long). The executor, the completer,
// the park writer, the admin calls, the heartbeat and the rescuer build
// their items here, so each rule exists once. A cancel is the one move
// built in SQL: the function cancel_tree (migration 035), which the SQL
// API's cancel_run shares, makes its items.
//
// Constructors return values: the completion path writes them into its
// reused arrays without allocating.
package outcome

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairnhq/cairn/store"
)

// Completed is a finished attempt whose handler returned nil: running ->
// completed with its output, detail (the attempt's log) on the event.
func Completed(taskID int64, attempt int, output, detail json.RawMessage) store.TransitionItem {
	return store.TransitionItem{TaskID: taskID, To: store.StatusCompleted, Attempt: attempt, Output: output, Detail: detail}
}

// Retry is a failed attempt with attempts left: running -> ready,
// claimable delay after the transaction's time (database clock), msg kept
// as the task's last error.
func Retry(taskID int64, attempt int, msg string, detail json.RawMessage, delay time.Duration) store.TransitionItem {
	return store.TransitionItem{TaskID: taskID, To: store.StatusReady, Attempt: attempt, Error: &msg, Detail: detail,
		DelayMs: delay.Milliseconds()}
}

// Failed is a failed attempt that gets no other: running -> failed, msg
// kept as the task's last error.
func Failed(taskID int64, attempt int, msg string, detail json.RawMessage) store.TransitionItem {
	return store.TransitionItem{TaskID: taskID, To: store.StatusFailed, Attempt: attempt, Error: &msg, Detail: detail}
}

// Lost is the outcome of an attempt whose row is no longer its own
// (cancelled, or rescued elsewhere): nothing is written (zero TaskID), the
// attempt only gives back its slot.
func Lost() store.TransitionItem { return store.TransitionItem{} }

// Parked is a handler parking its task (DeferUntil or a durable wait):
// running -> deferred, the slot released. from is the state the row is
// known to be in ("" when unsure). The caller adds the wait or condition
// (SetWait, SetCondition).
func Parked(taskID int64, attempt int, from string) store.TransitionItem {
	return store.TransitionItem{TaskID: taskID, From: from, To: store.StatusDeferred, Attempt: attempt}
}

// Resumed is a parked task taking a slot again: deferred -> running, its
// lease renewed to lease after the transaction's time. from is the state
// the row is known to be in ("" when unsure).
func Resumed(taskID int64, attempt int, from string, lease time.Duration) store.TransitionItem {
	return store.TransitionItem{TaskID: taskID, To: store.StatusRunning, From: from, Attempt: attempt,
		LeaseMs: lease.Milliseconds()}
}

// Released gives back to ready a task the database says a worker holds
// but no handler of it runs (a lost claim reply), reason kept as its last
// error. No attempt is checked: the worker never started one.
func Released(taskID int64, reason string) store.TransitionItem {
	return store.TransitionItem{TaskID: taskID, To: store.StatusReady, Error: &reason}
}

// Cause is what stopped a held task.
type Cause int

const (
	// Shutdown: this worker's graceful shutdown cancelled the handler.
	Shutdown Cause = iota
	// Rescue: the task's lease expired; its worker is taken for dead.
	Rescue
)

// Interrupt is what the interrupt rule reads of a held (running or
// deferred) task.
type Interrupt struct {
	Cause Cause
	// Reason says why, stored as the task's last error; the rule adds to it.
	Reason string
	// InWait says the task is parked in a durable wait (its row deferred
	// with a wait stored): no handler code is in flight.
	InWait bool
	// WaitKind is the durable wait's kind (store.WaitKind*), named in a
	// rescue's reason.
	WaitKind           string
	RequeueOnInterrupt bool
	// Rescues is how many times the task was rescued before this one, and
	// MaxRescues its budget; read on a rescue only.
	Rescues, MaxRescues int
}

// InterruptRule applies the interrupt rule (DESIGN.md, "Graceful shutdown"
// and "Leases, orphans, timeouts"): a task parked in a durable wait goes
// back to ready whatever RequeueOnInterrupt says (its next attempt replays
// its steps and waits for what is left) and its rescue is not counted; a
// rescued task past MaxRescues fails; otherwise RequeueOnInterrupt sends it
// to ready, and without it the task is parked interrupted. It returns the
// state to move to, the reason to record, and whether the move counts as a
// rescue.
func InterruptRule(in Interrupt) (to, reason string, rescue bool) {
	reason, rescue = in.Reason, in.Cause == Rescue
	switch {
	case in.InWait && rescue:
		// No handler code was in flight, so the task did not kill its
		// worker.
		return store.StatusReady, reason + "; parked in a durable wait (" + in.WaitKind + "): back to ready", false
	case in.InWait:
		return store.StatusReady, reason + " (parked in a durable wait)", false
	case rescue && in.Rescues+1 > in.MaxRescues:
		return store.StatusFailed, fmt.Sprintf("%s; rescued %d times (max_rescues %d): the task keeps losing its worker",
			reason, in.Rescues+1, in.MaxRescues), true
	case in.RequeueOnInterrupt:
		return store.StatusReady, reason, rescue
	}
	return store.StatusInterrupted, reason, rescue
}

// Interrupted is a held task stopped by a shutdown or a rescue, moved as
// the interrupt rule says (ready, interrupted, or failed past max_rescues).
func Interrupted(taskID int64, attempt int, in Interrupt) store.TransitionItem {
	to, reason, rescue := InterruptRule(in)
	// A graceful stop is not the task's failure: the attempt it cut short
	// does not spend the budget (a crash does; max_rescues bounds those).
	uncounted := in.Cause == Shutdown
	return store.TransitionItem{TaskID: taskID, To: to, Attempt: attempt, Rescue: rescue, Uncounted: uncounted, Error: &reason}
}

// Rescued is the rescuer's interrupt of t, whose lease expired: the
// interrupt rule with the reason naming the worker that stopped
// heartbeating.
func Rescued(t store.Task) store.TransitionItem {
	var worker int64
	if t.WorkerID != nil {
		worker = *t.WorkerID
	}
	in := Interrupt{Cause: Rescue, Reason: fmt.Sprintf("lease expired: worker %d stopped heartbeating", worker),
		RequeueOnInterrupt: t.RequeueOnInterrupt, Rescues: t.Rescues, MaxRescues: t.MaxRescues}
	if t.Status == store.StatusDeferred && t.WaitKind != nil {
		in.InWait, in.WaitKind = true, *t.WaitKind
	}
	return Interrupted(t.ID, t.Attempt, in)
}

// Policy is a task's retry policy with its defaults applied: the delay
// before attempt n+1 is min(InitialDelay·BackoffFactor^(n-1), MaxDelay),
// with ±10% jitter unless NoJitter; RetryIf and RetryOn, when set, narrow
// which errors are retried.
type Policy struct {
	InitialDelay  time.Duration
	MaxDelay      time.Duration
	BackoffFactor float64
	NoJitter      bool
	RetryIf       func(error) bool
	RetryOn       []string
}

// Delay returns the backoff after failed attempt n (n >= 1), without
// jitter.
func (p Policy) Delay(n int) time.Duration {
	d := float64(p.InitialDelay)
	for i := 1; i < n && d < float64(p.MaxDelay); i++ {
		d *= p.BackoffFactor
	}
	return min(time.Duration(d), p.MaxDelay)
}

// Retryable reports whether err may be retried under the policy: RetryIf
// accepts it and its message contains one of RetryOn (each when set).
func (p Policy) Retryable(err error) bool {
	if p.RetryIf != nil && !p.RetryIf(err) {
		return false
	}
	if len(p.RetryOn) > 0 {
		msg := err.Error()
		return slices.ContainsFunc(p.RetryOn, func(s string) bool { return strings.Contains(msg, s) })
	}
	return true
}

// Failure is a failed attempt as the retry rule reads it.
type Failure struct {
	// Attempt is the attempt that failed (from 1); MaxAttempts the budget.
	Attempt, MaxAttempts int
	// Err is the attempt's error (a timeout's included), matched by the
	// policy's RetryIf and RetryOn.
	Err error
	// Permanent says the error asks for no more attempts.
	Permanent bool
	// RetryAfter, when set, reads the delay Err asks for before the next
	// attempt instead of the policy's backoff (ok false: none). It is
	// called only when the attempt is retried, so that an attempt that
	// fails anyway does not pay for the search.
	RetryAfter func(err error) (delay time.Duration, ok bool)
}

// RetryRule applies the retry rule (DESIGN.md, "Retries"): a permanent
// error, the last attempt (a timeout on it too) or an error the policy does
// not retry fails the task (retry false); otherwise the next attempt comes
// after the delay the error asks for, or the policy's backoff jittered by
// rand (a source of numbers in [0, 1)). The policy's predicates are called
// only when attempts are left.
func RetryRule(f Failure, p Policy, rand func() float64) (delay time.Duration, retry bool) {
	if f.Permanent || f.Attempt >= f.MaxAttempts || !p.Retryable(f.Err) {
		return 0, false
	}
	if f.RetryAfter != nil {
		if d, ok := f.RetryAfter(f.Err); ok {
			return d, true
		}
	}
	delay = p.Delay(f.Attempt)
	if !p.NoJitter {
		delay = time.Duration(float64(delay) * (0.9 + 0.2*rand()))
	}
	return delay, true
}

// AfterFailure is a failed attempt moved as the retry rule says: Retry
// with its delay, or Failed. msg is kept as the task's last error.
func AfterFailure(taskID int64, f Failure, p Policy, rand func() float64, msg string, detail json.RawMessage) store.TransitionItem {
	if delay, retry := RetryRule(f, p, rand); retry {
		return Retry(taskID, f.Attempt, msg, detail, delay)
	}
	return Failed(taskID, f.Attempt, msg, detail)
}
