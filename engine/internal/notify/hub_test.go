package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// wait is how long a test waits for what it expects to happen.
const wait = 10 * time.Second

// calls records the engine's side of a hub: each callback sends what it
// was called with.
type calls struct {
	poked, capped, refreshed chan string
	taken                    chan taken
	signalled                chan int64
	reconnected              chan struct{}
}

// taken is one call of Config.Taken.
type taken struct {
	id      int64
	attempt int
}

type bundle struct {
	db    *pgtest.DB
	st    *store.Store
	hub   *Hub
	calls calls
	warns chan string // messages of the warnings the hub logged
}

// setup returns a hub over a fresh database whose engine runs the queue
// "q" only.
func setup(t *testing.T) bundle {
	t.Helper()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	c := calls{poked: make(chan string, 10), capped: make(chan string, 10), refreshed: make(chan string, 10),
		taken: make(chan taken, 10), signalled: make(chan int64, 10), reconnected: make(chan struct{}, 10)}
	warns := make(chan string, 10)
	log := slog.New(&warnHandler{warns: warns})
	h := NewHub(Config{Store: st, Logger: log, Health: backoff.NewHealth(log, time.Now),
		Poke:       func(q string) { c.poked <- q },
		Capped:     func(q string) bool { c.capped <- q; return q == "q" },
		RefreshCap: func(q string) { c.refreshed <- q },
		Taken:      func(id int64, attempt int) { c.taken <- taken{id, attempt} },
		Signal:     func(id int64) { c.signalled <- id },
		Reconnected: func() {
			c.reconnected <- struct{}{}
		}})
	t.Cleanup(h.Close)
	return bundle{db: db, st: st, hub: h, calls: c, warns: warns}
}

// warnHandler sends the message of every warning it handles.
type warnHandler struct{ warns chan string }

func (h *warnHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (h *warnHandler) Handle(_ context.Context, r slog.Record) error {
	h.warns <- r.Message
	return nil
}
func (h *warnHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnHandler) WithGroup(string) slog.Handler      { return h }

func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(wait):
		t.Fatalf("no %s", what)
		var zero T
		return zero
	}
}

func requireNone[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("unexpected %s: %v", what, v)
	default:
	}
}

func encode(t *testing.T, m interface{ Encode() (string, error) }) string {
	t.Helper()
	p, err := m.Encode()
	require.NoError(t, err)
	return p
}

// Each kind of notification reaches what it concerns: ready work the
// queue's claim loops, taken and signalled tasks their handlers, a
// changed queue the read of its cap (then its claim loops), transitions
// the event subscribers, log notes the log subscribers, an ended run its
// waits.
func TestHubDispatchesEachKindOfNotification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events, stopEvents := b.hub.Subscribe(10)
	defer stopEvents()
	logs, stopLogs := b.hub.SubscribeLogs(10)
	defer stopLogs()
	woken, done := b.hub.AwaitRun(7)
	defer done()
	other, doneOther := b.hub.AwaitRun(8)
	defer doneOther()

	b.hub.Dispatch(store.Notification{Channel: b.st.ReadyChannel(), Payload: encode(t, store.ReadyMessage{Queue: "q"})})
	require.Equal(t, "q", receive(t, b.calls.poked, "poke"))

	control := func(m store.ControlMessage) {
		b.hub.Dispatch(store.Notification{Channel: b.st.ControlChannel(), Payload: encode(t, m)})
	}
	control(store.ControlMessage{Kind: store.ControlTaken, TaskIDs: []int64{1, 2}, Attempts: []int{3, 1}})
	require.Equal(t, taken{1, 3}, receive(t, b.calls.taken, "taken task"))
	require.Equal(t, taken{2, 1}, receive(t, b.calls.taken, "taken task"))
	// From a version before the attempts: whichever attempt runs.
	control(store.ControlMessage{Kind: store.ControlTaken, TaskIDs: []int64{9}})
	require.Equal(t, taken{9, 0}, receive(t, b.calls.taken, "taken task"))
	control(store.ControlMessage{Kind: store.ControlSignal, TaskIDs: []int64{3}})
	require.Equal(t, int64(3), receive(t, b.calls.signalled, "signalled task"))

	control(store.ControlMessage{Kind: store.ControlQueue, Queue: "q"})
	require.Equal(t, "q", receive(t, b.calls.capped, "capped queue"))
	require.Equal(t, "q", receive(t, b.calls.refreshed, "cap read"))
	require.Equal(t, "q", receive(t, b.calls.poked, "poke after the cap read"))
	control(store.ControlMessage{Kind: store.ControlQueue, Queue: "elsewhere"})
	require.Equal(t, "elsewhere", receive(t, b.calls.capped, "capped queue"))

	control(store.ControlMessage{Kind: store.ControlRun, RunIDs: []int64{7}})
	receive(t, woken, "wake of run 7's wait")
	control(store.ControlMessage{Kind: "unknown to this version"})

	b.hub.Dispatch(store.Notification{Channel: b.st.EventsChannel(), Payload: encode(t, store.EventsMessage{
		Transitions: []store.TransitionNote{{TaskID: 4, RunID: 5, From: "ready", To: "running", Queue: "q", Attempt: 1, WorkerID: 6}},
		Logs:        []store.LogNote{{TaskID: 4, RunID: 5}}})})
	require.Equal(t, Event{TaskID: 4, RunID: 5, From: "ready", To: "running", Queue: "q", Attempt: 1, WorkerID: 6},
		receive(t, events, "event"))
	require.Equal(t, LogNote{TaskID: 4, RunID: 5}, receive(t, logs, "log note"))

	b.hub.Close() // waits for the cap reads it started
	requireNone(t, b.calls.refreshed, "cap read of a queue the engine does not run")
	requireNone(t, b.calls.poked, "poke")
	requireNone(t, other, "wake of run 8's wait")
	requireNone(t, b.warns, "warning")
	_, open := <-events
	require.False(t, open, "Close closes the subscribers' channels")
	_, open = <-logs
	require.False(t, open)
}

// A payload that is not a message of its channel is logged and dropped.
func TestHubDropsMalformedNotifications(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, channel := range []string{b.st.ReadyChannel(), b.st.ControlChannel(), b.st.EventsChannel()} {
		b.hub.Dispatch(store.Notification{Channel: channel, Payload: ""})
		require.Equal(t, "drop malformed notification", receive(t, b.warns, "warning"), channel)
	}
	requireNone(t, b.calls.poked, "poke")
}

// A subscriber whose buffer is full misses events, counted, and never
// holds the others back; a log subscriber misses notes alike.
func TestHubDropsAndCountsWhenASubscriberIsFull(t *testing.T) {
	t.Parallel()
	b := setup(t)
	slow, stopSlow := b.hub.Subscribe(1)
	defer stopSlow()
	fast, stopFast := b.hub.Subscribe(10)
	defer stopFast()
	logs, stopLogs := b.hub.SubscribeLogs(1)
	defer stopLogs()
	msg := store.EventsMessage{Logs: []store.LogNote{{TaskID: 1, RunID: 1}, {TaskID: 2, RunID: 2}}}
	for i := range 3 {
		msg.Transitions = append(msg.Transitions, store.TransitionNote{TaskID: int64(i), RunID: 1, To: "ready", Queue: "q"})
	}
	b.hub.Dispatch(store.Notification{Channel: b.st.EventsChannel(), Payload: encode(t, msg)})
	require.EqualValues(t, 2, b.hub.DroppedEvents(), "the slow subscriber missed two events")
	require.EqualValues(t, 0, receive(t, slow, "event").TaskID)
	requireNone(t, slow, "event")
	for i := range 3 {
		require.EqualValues(t, i, receive(t, fast, "event").TaskID)
	}
	require.EqualValues(t, 1, receive(t, logs, "log note").TaskID)
	requireNone(t, logs, "log note")

	stopSlow()
	stopSlow() // safe twice
	_, open := <-slow
	require.False(t, open)
}

// A run's end wakes its waits only; after the listener reconnects, every
// wait reads its run again; a wait that is done is not woken.
func TestHubWakesRunWaiters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a1, done1 := b.hub.AwaitRun(1)
	a2, done2 := b.hub.AwaitRun(1)
	other, doneOther := b.hub.AwaitRun(2)
	defer doneOther()
	run := func(ids ...int64) {
		b.hub.Dispatch(store.Notification{Channel: b.st.ControlChannel(),
			Payload: encode(t, store.ControlMessage{Kind: store.ControlRun, RunIDs: ids})})
	}
	run(1)
	run(1) // a wait already woken stays woken once
	receive(t, a1, "wake")
	receive(t, a2, "wake")
	requireNone(t, a1, "second wake")
	requireNone(t, other, "wake of another run's wait")

	done2()
	b.hub.reconnected()
	receive(t, b.calls.reconnected, "the engine's reconnect")
	receive(t, a1, "wake after a reconnect")
	receive(t, other, "wake after a reconnect")
	requireNone(t, a2, "wake of a wait that is done")
	done1()
	b.hub.waiters.mu.Lock()
	require.Equal(t, 1, len(b.hub.waiters.m), "only run 2 is awaited")
	b.hub.waiters.mu.Unlock()
}

// A listening hub registers in event_listeners while something subscribes
// (so statements announce transitions) and hears what the database
// announces; Release drops the row.
func TestHubListensAndRegistersWhileSomethingSubscribes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	announcing := func() bool {
		t.Helper()
		var n int
		require.NoError(t, b.db.SQL.QueryRow(fmt.Sprintf(`SELECT count(*) FROM %s.event_listeners`, pgtest.Schema)).Scan(&n))
		return n > 0
	}
	require.NoError(t, b.hub.RunOnce(ctx), "no listener: nothing to do")
	require.False(t, b.hub.Listening())
	require.NoError(t, b.hub.Listen(ctx, b.db.URL, "test/holder"))
	require.True(t, b.hub.Listening())
	require.False(t, announcing(), "no subscriber: no row")
	require.NoError(t, b.hub.Start(ctx))
	defer b.hub.Stop()

	events, stop := b.hub.Subscribe(10)
	require.True(t, announcing(), "Subscribe returns once registered")
	notify := func(channel string, m interface{ Encode() (string, error) }) {
		_, err := b.db.SQL.ExecContext(ctx, `SELECT pg_notify($1, $2)`, channel, encode(t, m))
		require.NoError(t, err)
	}
	notify(b.st.EventsChannel(), store.EventsMessage{Transitions: []store.TransitionNote{{TaskID: 9, RunID: 9, To: "ready", Queue: "q"}}})
	require.EqualValues(t, 9, receive(t, events, "event").TaskID)
	notify(b.st.ReadyChannel(), store.ReadyMessage{Queue: "q"})
	require.Equal(t, "q", receive(t, b.calls.poked, "poke"))

	stop()
	require.NoError(t, b.hub.RunOnce(ctx))
	require.False(t, announcing(), "the last subscriber gone: the row is dropped")
	_, stop = b.hub.SubscribeLogs(1)
	defer stop()
	require.True(t, announcing(), "a log subscriber counts")
	require.NoError(t, b.hub.Release(ctx))
	require.False(t, announcing())
	b.hub.Stop()
	b.hub.Stop() // safe twice
}

// A hub that never listened starts and stops as a service.
func TestHubWithoutListenerStartsAndStops(t *testing.T) {
	t.Parallel()
	h := NewHub(Config{})
	h.Stop() // before Start
	require.NoError(t, h.Start(context.Background()))
	h.Stop()
	h.Stop()
	require.NoError(t, h.Release(context.Background()))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); h.Close() }()
	wg.Wait()
}

// WaitRun reads the run, marks it awaited, reads it again, then reads it
// at each wake-up until it ended; an error of a read ends the wait, and
// so does its context.
func TestHubWaitRunReadsAtEachWake(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var mu sync.Mutex
	reads, marks, endAt := 0, 0, 3
	read := make(chan int, 10)
	w := RunWait{ID: 5, Poll: time.Hour, Recheck: time.Hour,
		Ended: func(context.Context) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			reads++
			read <- reads
			return reads >= endAt, nil
		},
		Mark: func(context.Context) error { mu.Lock(); marks++; mu.Unlock(); return nil }}
	done := make(chan error, 1)
	go func() { done <- b.hub.WaitRun(context.Background(), w) }()
	require.Equal(t, 1, <-read)
	require.Equal(t, 2, <-read, "read again after the mark")
	b.hub.Dispatch(store.Notification{Channel: b.st.ControlChannel(),
		Payload: encode(t, store.ControlMessage{Kind: store.ControlRun, RunIDs: []int64{5}})})
	require.Equal(t, 3, <-read, "read at the wake-up")
	require.NoError(t, <-done)
	mu.Lock()
	require.Equal(t, 1, marks)
	mu.Unlock()

	boom := errors.New("boom")
	w.Ended = func(context.Context) (bool, error) { return false, boom }
	require.ErrorIs(t, b.hub.WaitRun(context.Background(), w), boom)

	w.Ended = func(context.Context) (bool, error) { return false, nil }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, b.hub.WaitRun(ctx, w), context.Canceled)
}
