package notify

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// An enqueue announces its queues in its own transaction unless another
// enqueue of the process is in flight; the waker announces those after
// their commit, and once closed every enqueue announces itself.
func TestWakerAnnouncesConcurrentEnqueuesAfterTheirCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	heard := make(chan string, 10)
	ln, err := store.Listen(ctx, store.ListenParams{DSN: db.URL, Channels: []string{st.ReadyChannel()},
		Logger: slog.New(slog.DiscardHandler), OnNotify: func(n store.Notification) { heard <- n.Payload }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	next := func() string {
		t.Helper()
		select {
		case q := <-heard:
			return q
		case <-time.After(10 * time.Second):
			t.Fatal("nothing announced")
			return ""
		}
	}
	w := NewWaker(st, backoff.NewHealth(slog.New(slog.DiscardHandler), time.Now))

	require.True(t, w.Begin(), "a lone enqueue announces in its transaction")
	require.False(t, w.Begin(), "one concurrent with it does not")
	require.False(t, w.Begin())
	w.End([]string{"a"}, true, true) // announced in its transaction: nothing to send
	w.End([]string{"b"}, false, false)
	w.End([]string{"c"}, false, true)
	require.Equal(t, "c", next(), "a quiet enqueue that committed is announced after; a failed one is not")
	require.EqualValues(t, 1, w.Quiet())
	require.True(t, w.Begin(), "alone again")
	w.End(nil, true, true)

	require.True(t, w.Begin())
	require.False(t, w.Begin())
	w.Close()
	require.True(t, w.Begin(), "once closed, every enqueue announces itself")
	w.End([]string{"d"}, false, true) // began before close: announced by its end
	require.Equal(t, "d", next())
	w.End(nil, true, true)
	w.End(nil, true, true)
	require.Zero(t, w.inflight.Load())
	w.Close() // safe twice
	select {
	case q := <-heard:
		t.Fatalf("unexpected announcement of %q", q)
	default:
	}
}

// A failed announcement is reported to the health tracker as the loop
// "waker".
func TestWakerReportsFailedAnnouncements(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	closed, err := store.Open(context.Background(), db.URL, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, closed.Close()) // every announcement fails
	st, err := store.New(closed, pgtest.Schema)
	require.NoError(t, err)
	health := backoff.NewHealth(slog.New(slog.DiscardHandler), time.Now)
	w := NewWaker(st, health)
	require.True(t, w.Begin())
	require.False(t, w.Begin())
	w.End([]string{"q"}, false, true)
	w.Close() // waits for the announcing goroutine
	require.EqualValues(t, 1, health.FailedTries("waker"))
	w.End(nil, true, true)
}
