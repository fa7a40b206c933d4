package outcome_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cairnhq/cairn/engine/internal/outcome"
	"github.com/cairnhq/cairn/store"
	"github.com/stretchr/testify/require"
)

// TestInterruptRule drives every row of DESIGN.md's interrupt table (a
// held task: running or deferred, requeue_on_interrupt or not), for a
// graceful shutdown and a rescue, plus durable waits and max_rescues.
func TestInterruptRule(t *testing.T) {
	t.Parallel()
	const shut = "interrupted by shutdown"
	const lease = "lease expired: worker 7 stopped heartbeating"
	for _, tc := range []struct {
		name       string
		in         outcome.Interrupt
		to, reason string
		rescue     bool
	}{
		{name: "shutdown requeue", in: outcome.Interrupt{Cause: outcome.Shutdown, Reason: shut, RequeueOnInterrupt: true},
			to: store.StatusReady, reason: shut},
		{name: "shutdown no requeue", in: outcome.Interrupt{Cause: outcome.Shutdown, Reason: shut},
			to: store.StatusInterrupted, reason: shut},
		{name: "shutdown in a durable wait, no requeue", in: outcome.Interrupt{Cause: outcome.Shutdown, Reason: shut, InWait: true},
			to: store.StatusReady, reason: shut + " (parked in a durable wait)"},
		{name: "shutdown in a durable wait, requeue", in: outcome.Interrupt{Cause: outcome.Shutdown, Reason: shut, InWait: true, RequeueOnInterrupt: true},
			to: store.StatusReady, reason: shut + " (parked in a durable wait)"},
		{name: "shutdown ignores max_rescues", in: outcome.Interrupt{Cause: outcome.Shutdown, Reason: shut, Rescues: 5, MaxRescues: 1},
			to: store.StatusInterrupted, reason: shut},
		{name: "rescue requeue", in: outcome.Interrupt{Cause: outcome.Rescue, Reason: lease, RequeueOnInterrupt: true, MaxRescues: 3},
			to: store.StatusReady, reason: lease, rescue: true},
		{name: "rescue no requeue", in: outcome.Interrupt{Cause: outcome.Rescue, Reason: lease, Rescues: 2, MaxRescues: 3},
			to: store.StatusInterrupted, reason: lease, rescue: true},
		{name: "rescue past max_rescues", in: outcome.Interrupt{Cause: outcome.Rescue, Reason: lease, RequeueOnInterrupt: true, Rescues: 3, MaxRescues: 3},
			to: store.StatusFailed, reason: lease + "; rescued 4 times (max_rescues 3): the task keeps losing its worker", rescue: true},
		{name: "rescue in a durable wait", in: outcome.Interrupt{Cause: outcome.Rescue, Reason: lease, InWait: true, WaitKind: store.WaitKindSignal},
			to: store.StatusReady, reason: lease + "; parked in a durable wait (signal): back to ready"},
		{name: "rescue in a durable wait past max_rescues", in: outcome.Interrupt{Cause: outcome.Rescue, Reason: lease, InWait: true,
			WaitKind: store.WaitKindSleep, Rescues: 3, MaxRescues: 3},
			to: store.StatusReady, reason: lease + "; parked in a durable wait (sleep): back to ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to, reason, rescue := outcome.InterruptRule(tc.in)
			require.Equal(t, tc.to, to)
			require.Equal(t, tc.reason, reason)
			require.Equal(t, tc.rescue, rescue)

			item := outcome.Interrupted(42, 2, tc.in)
			require.Equal(t, store.TransitionItem{TaskID: 42, To: tc.to, Attempt: 2, Rescue: tc.rescue, Error: &tc.reason,
				Uncounted: tc.in.Cause == outcome.Shutdown}, item, "a graceful stop spends no attempt, a rescue does")
		})
	}
}

// TestRescued checks the rescuer's item for tasks as TaskExpiredLeases
// returns them: the reason names the dead worker, and only a deferred row
// with a wait stored counts as parked in a durable wait.
func TestRescued(t *testing.T) {
	t.Parallel()
	worker, signal := int64(7), store.WaitKindSignal
	const lease = "lease expired: worker 7 stopped heartbeating"
	for _, tc := range []struct {
		name       string
		task       store.Task
		to, reason string
		rescue     bool
	}{
		{name: "running, requeue",
			task: store.Task{Status: store.StatusRunning, RequeueOnInterrupt: true, MaxRescues: 3},
			to:   store.StatusReady, reason: lease, rescue: true},
		{name: "running, no requeue",
			task: store.Task{Status: store.StatusRunning, MaxRescues: 3},
			to:   store.StatusInterrupted, reason: lease, rescue: true},
		{name: "deferred by DeferUntil, no requeue",
			task: store.Task{Status: store.StatusDeferred, MaxRescues: 3},
			to:   store.StatusInterrupted, reason: lease, rescue: true},
		{name: "deferred in a durable wait",
			task: store.Task{Status: store.StatusDeferred, WaitKind: &signal, Rescues: 3, MaxRescues: 3},
			to:   store.StatusReady, reason: lease + "; parked in a durable wait (signal): back to ready"},
		{name: "past max_rescues",
			task: store.Task{Status: store.StatusRunning, Rescues: 1, MaxRescues: 1},
			to:   store.StatusFailed, reason: lease + "; rescued 2 times (max_rescues 1): the task keeps losing its worker", rescue: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.task.ID, tc.task.Attempt, tc.task.WorkerID = 42, 3, &worker
			item := outcome.Rescued(tc.task)
			require.Equal(t, store.TransitionItem{TaskID: 42, To: tc.to, Attempt: 3, Rescue: tc.rescue, Error: &tc.reason}, item)
		})
	}
	item := outcome.Rescued(store.Task{ID: 1, Status: store.StatusRunning, MaxRescues: 3})
	require.Equal(t, "lease expired: worker 0 stopped heartbeating", *item.Error, "a row without a worker")
}

// after is a Failure.RetryAfter for an error that asks for d.
func after(d time.Duration) func(error) (time.Duration, bool) {
	return func(error) (time.Duration, bool) { return d, true }
}

// policy is the default retry policy (engine.RetryPolicy's defaults).
func policy() outcome.Policy {
	return outcome.Policy{InitialDelay: time.Second, MaxDelay: time.Hour, BackoffFactor: 2}
}

func TestRetryRule(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	noJitter := policy()
	noJitter.NoJitter = true
	refuse := noJitter
	refuse.RetryIf = func(err error) bool { return !errors.Is(err, boom) }
	accept := noJitter
	accept.RetryIf = func(err error) bool { return errors.Is(err, boom) }
	on := noJitter
	on.RetryOn = []string{"connection reset", "timeout"}
	for _, tc := range []struct {
		name    string
		f       outcome.Failure
		p       outcome.Policy
		rand    float64
		delay   time.Duration
		retried bool
	}{
		{name: "attempts left", f: outcome.Failure{Attempt: 1, MaxAttempts: 3, Err: boom}, p: noJitter, delay: time.Second, retried: true},
		{name: "backoff grows", f: outcome.Failure{Attempt: 3, MaxAttempts: 5, Err: boom}, p: noJitter, delay: 4 * time.Second, retried: true},
		{name: "backoff capped", f: outcome.Failure{Attempt: 40, MaxAttempts: 50, Err: boom}, p: noJitter, delay: time.Hour, retried: true},
		{name: "jitter low", f: outcome.Failure{Attempt: 2, MaxAttempts: 3, Err: boom}, p: policy(), rand: 0, delay: 1800 * time.Millisecond, retried: true},
		{name: "jitter high", f: outcome.Failure{Attempt: 2, MaxAttempts: 3, Err: boom}, p: policy(), rand: 1, delay: 2200 * time.Millisecond, retried: true},
		{name: "exhausted", f: outcome.Failure{Attempt: 3, MaxAttempts: 3, Err: boom}, p: noJitter},
		{name: "timeout on the last attempt", f: outcome.Failure{Attempt: 1, MaxAttempts: 1, Err: fmt.Errorf("timeout after 1s: %w", boom)}, p: noJitter},
		{name: "permanent", f: outcome.Failure{Attempt: 1, MaxAttempts: 3, Err: boom, Permanent: true}, p: noJitter},
		{name: "retry after", f: outcome.Failure{Attempt: 1, MaxAttempts: 3, Err: boom, RetryAfter: after(90 * time.Second)},
			p: policy(), rand: 1, delay: 90 * time.Second, retried: true},
		{name: "retry after zero", f: outcome.Failure{Attempt: 2, MaxAttempts: 3, Err: boom, RetryAfter: after(0)}, p: noJitter, retried: true},
		{name: "retry after on the last attempt", f: outcome.Failure{Attempt: 3, MaxAttempts: 3, Err: boom, RetryAfter: after(time.Second)}, p: noJitter},
		{name: "retry after, permanent", f: outcome.Failure{Attempt: 1, MaxAttempts: 3, Err: boom, Permanent: true, RetryAfter: after(time.Second)}, p: noJitter},
		{name: "no retry after asked", f: outcome.Failure{Attempt: 1, MaxAttempts: 3, Err: boom,
			RetryAfter: func(error) (time.Duration, bool) { return time.Minute, false }}, p: noJitter, delay: time.Second, retried: true},
		{name: "RetryIf refuses", f: outcome.Failure{Attempt: 1, MaxAttempts: 3, Err: boom}, p: refuse},
		{name: "RetryIf accepts", f: outcome.Failure{Attempt: 1, MaxAttempts: 3, Err: boom}, p: accept, delay: time.Second, retried: true},
		{name: "RetryOn matches", f: outcome.Failure{Attempt: 1, MaxAttempts: 3, Err: errors.New("read: connection reset by peer")}, p: on,
			delay: time.Second, retried: true},
		{name: "RetryOn does not match", f: outcome.Failure{Attempt: 1, MaxAttempts: 3, Err: boom}, p: on},
	} {
		t.Run(tc.name, func(t *testing.T) {
			delay, retried := outcome.RetryRule(tc.f, tc.p, func() float64 { return tc.rand })
			require.Equal(t, tc.retried, retried)
			require.Equal(t, tc.delay, delay)

			detail := json.RawMessage(`{"log":[]}`)
			item := outcome.AfterFailure(9, tc.f, tc.p, func() float64 { return tc.rand }, "boom", detail)
			msg := "boom"
			want := store.TransitionItem{TaskID: 9, To: store.StatusFailed, Attempt: tc.f.Attempt, Error: &msg, Detail: detail}
			if tc.retried {
				want.To, want.DelayMs = store.StatusReady, tc.delay.Milliseconds()
			}
			require.Equal(t, want, item)
		})
	}
}

// TestRetryRuleAsksOnlyWithAttemptsLeft: a policy's RetryIf, and the
// search for a RetryAfter delay, are not called for an attempt that fails
// anyway; the delay is not searched for an error the policy refuses.
func TestRetryRuleAsksOnlyWithAttemptsLeft(t *testing.T) {
	t.Parallel()
	var ifCalls, afterCalls int
	retryIf := true
	p := policy()
	p.RetryIf = func(error) bool { ifCalls++; return retryIf }
	f := outcome.Failure{Attempt: 3, MaxAttempts: 3, Err: errors.New("x"),
		RetryAfter: func(error) (time.Duration, bool) { afterCalls++; return time.Second, true }}
	rand := func() float64 { return 0.5 }
	_, retried := outcome.RetryRule(f, p, rand)
	require.False(t, retried)
	f.Attempt, f.Permanent = 1, true
	_, retried = outcome.RetryRule(f, p, rand)
	require.False(t, retried)
	require.Zero(t, ifCalls)
	require.Zero(t, afterCalls)

	f.Permanent, retryIf = false, false
	_, retried = outcome.RetryRule(f, p, rand)
	require.False(t, retried)
	require.Equal(t, 1, ifCalls)
	require.Zero(t, afterCalls)

	retryIf = true
	delay, retried := outcome.RetryRule(f, p, rand)
	require.True(t, retried)
	require.Equal(t, time.Second, delay)
	require.Equal(t, 2, ifCalls)
	require.Equal(t, 1, afterCalls)
}

// TestConstructors checks each of the other kinds of item field by field.
func TestConstructors(t *testing.T) {
	t.Parallel()
	out, detail := json.RawMessage(`{"n":1}`), json.RawMessage(`{"by":"admin"}`)
	msg := "boom"
	reason := "claimed by this worker but never started (lost claim reply)"
	for _, tc := range []struct {
		name      string
		got, want store.TransitionItem
	}{
		{"completed", outcome.Completed(1, 2, out, detail),
			store.TransitionItem{TaskID: 1, To: store.StatusCompleted, Attempt: 2, Output: out, Detail: detail}},
		{"retry", outcome.Retry(1, 2, msg, detail, 1500*time.Millisecond),
			store.TransitionItem{TaskID: 1, To: store.StatusReady, Attempt: 2, Error: &msg, Detail: detail, DelayMs: 1500}},
		{"failed", outcome.Failed(1, 2, msg, nil),
			store.TransitionItem{TaskID: 1, To: store.StatusFailed, Attempt: 2, Error: &msg}},
		{"lost", outcome.Lost(), store.TransitionItem{}},
		{"parked", outcome.Parked(1, 2, store.StatusRunning),
			store.TransitionItem{TaskID: 1, From: store.StatusRunning, To: store.StatusDeferred, Attempt: 2}},
		{"resumed", outcome.Resumed(1, 2, store.StatusDeferred, 30*time.Second),
			store.TransitionItem{TaskID: 1, From: store.StatusDeferred, To: store.StatusRunning, Attempt: 2, LeaseMs: 30000}},
		{"released", outcome.Released(1, reason),
			store.TransitionItem{TaskID: 1, To: store.StatusReady, Error: &reason}},
	} {
		require.Equal(t, tc.want, tc.got, tc.name)
	}
}

// TestCompletedAllocatesNothing: the completion path's constructor
// returns a value.
func TestCompletedAllocatesNothing(t *testing.T) {
	out := json.RawMessage(`{}`)
	items := make([]store.TransitionItem, 0, 2)
	allocs := testing.AllocsPerRun(100, func() {
		items = append(items[:0], outcome.Completed(1, 1, out, nil), outcome.Resumed(2, 1, store.StatusDeferred, time.Second))[:0]
	})
	require.Zero(t, allocs)
}
