package engine_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// countHandler sends on seen each time a record with message msg is
// logged, and passes every record on to next.
type countHandler struct {
	next slog.Handler
	msg  string
	seen chan string
}

func (h *countHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *countHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		var channel string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "channel" {
				channel = a.Value.String()
			}
			return true
		})
		h.seen <- channel
	}
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h *countHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.next = h.next.WithAttrs(as)
	return &c
}

func (h *countHandler) WithGroup(name string) slog.Handler {
	c := *h
	c.next = h.next.WithGroup(name)
	return &c
}

// A payload that is not a message of its channel is logged and dropped,
// on every channel, and the engine goes on hearing good ones.
func TestMalformedNotificationsAreDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seen := make(chan string, 10)
	e := setup(t, func(c *engine.Config) {
		c.Logger = slog.New(&countHandler{next: testLogger(t).Handler(), msg: "drop malformed notification", seen: seen})
		c.PollInterval = time.Hour // work starts only when the ready channel is heard
	})
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: noop}}}))
	events, cancel := e.eng.Subscribe(100)
	defer cancel()
	start(t, e.eng)

	bad := map[string]string{
		e.st.EventsChannel():  `{"e": [[1, 2, null]]}`,
		e.st.ControlChannel(): `{"t": [1]}`,
		e.st.ReadyChannel():   ``,
	}
	for channel, payload := range bad {
		_, err := e.db.SQL.ExecContext(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
		require.NoError(t, err)
	}
	got := map[string]bool{}
	for len(got) < len(bad) {
		select {
		case ch := <-seen:
			got[ch] = true
		case <-time.After(20 * time.Second):
			t.Fatalf("dropped only %v", got)
		}
	}
	for channel := range bad {
		require.True(t, got[channel], channel)
	}

	run, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.RunID == run.ID && ev.To == store.StatusCompleted {
				return
			}
		case <-timeout:
			t.Fatal("no completion event after the malformed payloads")
		}
	}
}

// A "taken" control message stops the handler of the attempt it names
// and no other: the worker whose rescuer made a task ready may claim it
// again before it hears the message its rescue sent, and the new
// attempt runs on. A message that names no attempt (from a version
// before migration 036) stops whichever attempt runs.
func TestTakenMessageStopsOnlyTheAttemptTaken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var stopLogged <-chan struct{}
	e := setup(t, func(c *engine.Config) {
		c.Logger, stopLogged = onLog(c.Logger, "task taken from this worker: stopping its handler")
	})
	type started struct {
		task    string
		attempt int
	}
	starts := make(chan started, 10)
	stops := map[string]chan error{"a": make(chan error, 1), "b": make(chan error, 1)}
	block := func(name string) func(context.Context, *engine.TaskHandle) error {
		return func(ctx context.Context, h *engine.TaskHandle) error {
			if name == "a" && h.Attempt() == 1 {
				return errors.New("first attempt fails")
			}
			starts <- started{name, h.Attempt()}
			<-ctx.Done()
			stops[name] <- context.Cause(ctx)
			return ctx.Err()
		}
	}
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: block("a"),
		Retry: engine.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Millisecond}}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "v", Tasks: []engine.Task{{Name: "b", Run: block("b")}}}))
	start(t, e.eng)

	runA, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	require.Equal(t, started{"a", 2}, receiveWithin(t, starts, "attempt 2 of a"))
	runB, err := e.eng.Enqueue(ctx, "v", nil)
	require.NoError(t, err)
	require.Equal(t, started{"b", 1}, receiveWithin(t, starts, "attempt 1 of b"))
	a, b := taskByName(t, e.st, runA.ID, "a"), taskByName(t, e.st, runB.ID, "b")

	notify := func(m store.ControlMessage) {
		t.Helper()
		payload, err := m.Encode()
		require.NoError(t, err)
		_, err = e.db.SQL.ExecContext(ctx, `SELECT pg_notify($1, $2)`, e.st.ControlChannel(), payload)
		require.NoError(t, err)
	}
	// Attempt 1 of a was taken (as a rescue of it would announce), then b
	// (as a version before the attempts would say it). Notifications are
	// heard in commit order: once b's handler has stopped, a's message
	// was heard too.
	notify(store.ControlMessage{Kind: store.ControlTaken, TaskIDs: []int64{a.ID}, Attempts: []int{1}})
	notify(store.ControlMessage{Kind: store.ControlTaken, TaskIDs: []int64{b.ID}})
	require.ErrorIs(t, receiveWithin(t, stops["b"], "b's handler to stop"), engine.ErrTaskLost)
	receiveWithin(t, stopLogged, "the log line of the stop")
	select {
	case cause := <-stops["a"]:
		t.Fatalf("attempt 2 of a stopped (%v) on the take of attempt 1", cause)
	default:
	}
	notify(store.ControlMessage{Kind: store.ControlTaken, TaskIDs: []int64{a.ID}, Attempts: []int{2}})
	require.ErrorIs(t, receiveWithin(t, stops["a"], "a's handler to stop"), engine.ErrTaskLost)
}

// receiveWithin returns the next value of ch, failing the test after 20
// seconds without one.
func receiveWithin[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}
