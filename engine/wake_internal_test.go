package engine

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
	w := newWaker(st, backoff.NewHealth(slog.New(slog.DiscardHandler), time.Now).Loop("waker"))

	require.True(t, w.begin(), "a lone enqueue announces in its transaction")
	require.False(t, w.begin(), "one concurrent with it does not")
	require.False(t, w.begin())
	w.end([]string{"a"}, true, true) // announced in its transaction: nothing to send
	w.end([]string{"b"}, false, false)
	w.end([]string{"c"}, false, true)
	require.Equal(t, "c", next(), "a quiet enqueue that committed is announced after; a failed one is not")
	require.EqualValues(t, 1, w.quiet.Load())
	require.True(t, w.begin(), "alone again")
	w.end(nil, true, true)

	require.True(t, w.begin())
	require.False(t, w.begin())
	w.close()
	require.True(t, w.begin(), "once closed, every enqueue announces itself")
	w.end([]string{"d"}, false, true) // began before close: announced by its end
	require.Equal(t, "d", next())
	w.end(nil, true, true)
	w.end(nil, true, true)
	require.Zero(t, w.inflight.Load())
}
