package engine_test

import (
	"context"
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
