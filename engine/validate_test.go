package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// TestEntryPointsRefuseHostileInput: values PostgreSQL cannot take are
// refused at the entry point with ErrInvalidInput naming the field, and
// nothing is written.
func TestEntryPointsRefuseHostileInput(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: noop}}}))
	require.NoError(t, e.eng.CreateSchedule(ctx, engine.Schedule{Name: "s", Expression: "@hourly", Workflow: "w"}))
	require.NoError(t, e.st.QueueEnsure(ctx, []string{"default"}))
	enq := func(input string, opts ...engine.EnqueueOption) func() error {
		return func() error { _, err := e.eng.Enqueue(ctx, "w", json.RawMessage(input), opts...); return err }
	}
	big := 99999999999
	cases := []struct {
		name, field string
		call        func() error
	}{
		{"input NUL escape", "NUL", enq(`{"a":"\u0000"}`)},
		{"input NUL escape in key", "NUL", enq(`{"\u0000":1}`)},
		{"input lone surrogate", "surrogate", enq(`{"a":"\ud800"}`)},
		{"input lone low surrogate", "surrogate", enq(`{"a":["x\udc00"]}`)},
		{"input huge number", "numeric", enq(`{"a":1e1000000}`)},
		{"input tiny number", "numeric", enq(`{"a":1e-1000000}`)},
		{"key NUL", "key: contains a NUL byte", enq(`{}`, engine.WithKey("k\x00"))},
		{"key invalid UTF-8", "key: is not valid UTF-8", enq(`{}`, engine.WithKey("k\xff\xfe"))},
		{"queue NUL", "queue", enq(`{}`, engine.WithQueue("q\x00"))},
		{"priority int4", "priority 99999999999", enq(`{}`, engine.WithPriority(big))},
		{"priority negative int4", "priority", enq(`{}`, engine.WithPriority(-big))},
		{"run_at year", "run_at", enq(`{}`, engine.WithRunAt(time.Date(20000, 1, 1, 0, 0, 0, 0, time.UTC)))},
		{"run_at year 0", "run_at", enq(`{}`, engine.WithRunAt(time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC)))},
		{"pause queue NUL", "queue", func() error { return e.eng.PauseQueue(ctx, "default\x00") }},
		{"resume queue UTF-8", "queue", func() error { return e.eng.ResumeQueue(ctx, "\xff") }},
		{"cap int4", "max_running 99999999999", func() error { return e.eng.SetQueueCap(ctx, "default", &big) }},
		{"cap queue NUL", "queue", func() error { n := 1; return e.eng.SetQueueCap(ctx, "d\x00", &n) }},
		{"pause schedule NUL", "schedule name", func() error { return e.eng.PauseSchedule(ctx, "s\x00") }},
		{"resume schedule NUL", "schedule name", func() error { return e.eng.ResumeSchedule(ctx, "s\x00") }},
		{"fire schedule NUL", "schedule name", func() error { _, err := e.eng.FireSchedule(ctx, "s\x00"); return err }},
		{"delete schedule UTF-8", "schedule name", func() error { return e.eng.DeleteSchedule(ctx, "s\xff") }},
		{"many: one bad", "run 1", func() error {
			_, err := e.eng.EnqueueMany(ctx, []engine.EnqueueParams{{Workflow: "w"}, {Workflow: "w", Options: []engine.EnqueueOption{engine.WithKey("\x00")}}})
			return err
		}},
	}
	for _, c := range cases {
		err := c.call()
		require.ErrorIs(t, err, engine.ErrInvalidInput, c.name)
		require.ErrorContains(t, err, c.field, c.name)
	}
	ids, err := e.st.RunIDListFiltered(ctx, &store.RunListParams{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, ids, "a refused call enqueued a run")
	q, err := e.st.QueueGet(ctx, "default")
	require.NoError(t, err)
	require.False(t, q.Paused)
	require.Nil(t, q.MaxRunning)
	sc, err := e.st.ScheduleGet(ctx, "s")
	require.NoError(t, err)
	require.False(t, sc.Paused)
	qs, err := e.st.QueueList(ctx)
	require.NoError(t, err)
	require.Len(t, qs, 1)

	// Valid neighbours of the refused values still pass.
	for _, in := range []string{`{"a":"\\u0000"}`, `{"a":"\ud83d\ude00"}`, `{"a":1e131071}`, `{"a":-2147483648}`} {
		require.NoError(t, enq(in)(), in)
	}
	require.NoError(t, enq(`{}`, engine.WithPriority(-2147483648), engine.WithKey("ключ ✓"))())
}

func TestConfigRefusesCapBeyondInt4(t *testing.T) {
	t.Parallel()
	db := setup(t, nil).db
	_, err := engine.New(db.SQL, engine.Config{Queues: map[string]engine.QueueConfig{"q": {MaxRunning: 99999999999}}})
	require.ErrorIs(t, err, engine.ErrInvalidConfig)
	require.ErrorContains(t, err, "MaxRunning")
}

// TestHandlerNULsDoNotStallCompletions: a handler's error message and
// log with NUL bytes are stored (NUL replaced), output PostgreSQL cannot
// take is refused by SetOutput, and the other tasks' completions are
// written: before, one such attempt failed its completion batch forever.
func TestHandlerNULsDoNotStallCompletions(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	outputErr := make(chan error, 1)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{
		{Name: "bad", Retry: engine.RetryPolicy{MaxAttempts: 1}, Run: func(ctx context.Context, h *engine.TaskHandle) error {
			h.Logger().Info("log with \x00 inside", "v", "x\x00y")
			return errors.New("error with \x00 inside")
		}},
		{Name: "out", Run: func(ctx context.Context, h *engine.TaskHandle) error {
			outputErr <- h.SetOutput(map[string]string{"a": "\x00"})
			return h.SetOutput(map[string]string{"a": "ok"})
		}},
		{Name: "good", Run: noop},
	}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	require.ErrorIs(t, <-outputErr, engine.ErrInvalidInput)
	bad := taskByName(t, e.st, run.ID, "bad")
	require.Equal(t, store.StatusFailed, bad.Status)
	require.NotNil(t, bad.LastError)
	require.True(t, strings.HasPrefix(*bad.LastError, "error with \uFFFD inside"), *bad.LastError)
	require.Equal(t, store.StatusCompleted, taskByName(t, e.st, run.ID, "out").Status)
	require.Equal(t, store.StatusCompleted, taskByName(t, e.st, run.ID, "good").Status)
}
