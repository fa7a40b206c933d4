package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestNotifyMessagesRoundTrip(t *testing.T) {
	t.Parallel()
	ev := store.EventsMessage{Transitions: []store.TransitionNote{
		{TaskID: 1, RunID: 2, To: store.StatusReady, Queue: "default"},
		{TaskID: 9223372036854775807, RunID: 7, From: store.StatusReady, To: store.StatusRunning, Queue: "q.a:b-c_d", Attempt: 3, WorkerID: 42},
	}}
	payload, err := ev.Encode()
	require.NoError(t, err)
	gotEv, err := store.DecodeEvents(payload)
	require.NoError(t, err)
	require.Equal(t, ev, gotEv)

	for _, m := range []store.ControlMessage{
		{Kind: store.ControlTaken, TaskIDs: []int64{1, 2, 3}, Attempts: []int{1, 4, 2}},
		{Kind: store.ControlTaken, TaskIDs: []int64{1}}, // from a version before the attempts
		{Kind: store.ControlSignal, TaskIDs: []int64{5}},
		{Kind: store.ControlQueue, Queue: "default"},
	} {
		payload, err := m.Encode()
		require.NoError(t, err)
		got, err := store.DecodeControl(payload)
		require.NoError(t, err)
		require.Equal(t, m, got)
	}

	payload, err = store.ReadyMessage{Queue: "default"}.Encode()
	require.NoError(t, err)
	require.Equal(t, "default", payload)
	ready, err := store.DecodeReady(payload)
	require.NoError(t, err)
	require.Equal(t, store.ReadyMessage{Queue: "default"}, ready)
}

// A newer version may add keys and append transition fields: this one
// reads what it knows and ignores the rest.
func TestNotifyDecodeIgnoresUnknownFields(t *testing.T) {
	t.Parallel()
	ev, err := store.DecodeEvents(`{"v": 2, "e": [[1, 2, null, "ready", "default", 0, null, "extra", {"x": 1}]], "more": [1]}`)
	require.NoError(t, err)
	require.Equal(t, []store.TransitionNote{{TaskID: 1, RunID: 2, To: "ready", Queue: "default"}}, ev.Transitions)

	ctl, err := store.DecodeControl(`{"k": "signal", "t": [4], "why": "test", "q": ""}`)
	require.NoError(t, err)
	require.Equal(t, store.ControlMessage{Kind: store.ControlSignal, TaskIDs: []int64{4}}, ctl)

	ctl, err = store.DecodeControl(`{"k": "future", "z": 1}`)
	require.NoError(t, err)
	require.Equal(t, store.ControlKind("future"), ctl.Kind)
}

func TestNotifyDecodeRefusesMalformedPayloads(t *testing.T) {
	t.Parallel()
	decoders := map[string]func(string) error{
		"events":  func(p string) error { _, err := store.DecodeEvents(p); return err },
		"control": func(p string) error { _, err := store.DecodeControl(p); return err },
		"ready":   func(p string) error { _, err := store.DecodeReady(p); return err },
	}
	cases := []struct{ message, payload string }{
		{"events", ``},
		{"events", `not json`},
		{"events", `null`},
		{"events", `{}`},
		{"events", `{"e": null}`},
		{"events", `{"e": 5}`},
		{"events", `{"e": [5]}`},
		{"events", `{"e": [[1, 2, null, "ready", "default", 0]]}`},
		{"events", `{"e": [["1", 2, null, "ready", "default", 0, null]]}`},
		{"events", `{"e": [[null, 2, null, "ready", "default", 0, null]]}`},
		{"events", `{"e": [[1, 2, null, null, "default", 0, null]]}`},
		{"events", `{"e": [[1, 2, 3, "ready", "default", 0, null]]}`},
		{"events", `{"e": [[1, 2, null, "ready", "default", 1.5, null]]}`},
		{"events", `{"e": [[1, 2, null, "ready", "default", 0, "w"]]}`},
		{"events", `{"e": [{"id": 1}]}`},
		{"events", `[[1, 2, null, "ready", "default", 0, null]]`},
		{"control", ``},
		{"control", `[]`},
		{"control", `{}`},
		{"control", `{"k": 5}`},
		{"control", `{"k": "taken", "t": ["a"]}`},
		{"control", `{"k": "taken", "t": [1.5]}`},
		{"control", `{"k": "taken", "t": 1}`},
		{"control", `{"k": "taken", "t": [1, 2], "a": [1]}`},
		{"control", `{"k": "taken", "t": [1], "a": ["1"]}`},
		{"control", `{"k": "queue", "q": 1}`},
		{"ready", ``},
	}
	for _, c := range cases {
		err := decoders[c.message](c.payload)
		require.Error(t, err, "%s %q", c.message, c.payload)
		require.ErrorIs(t, err, store.ErrBadNotification, "%s %q", c.message, c.payload)
		var ne *store.NotificationError
		require.True(t, errors.As(err, &ne))
		require.Equal(t, c.message, ne.Message)
	}
}

func TestNotifyEncodeRefusesOversizePayload(t *testing.T) {
	t.Parallel()
	ids := make([]int64, 1000)
	for i := range ids {
		ids[i] = 1 << 62
	}
	_, err := store.ControlMessage{Kind: store.ControlTaken, TaskIDs: ids}.Encode()
	require.ErrorContains(t, err, "NOTIFY takes fewer than 8000")
	_, err = store.ControlMessage{TaskIDs: []int64{1}}.Encode()
	require.Error(t, err)
	_, err = store.ControlMessage{Kind: store.ControlTaken, TaskIDs: []int64{1, 2}, Attempts: []int{1}}.Encode()
	require.ErrorContains(t, err, "1 attempts for 2 task ids")
}

// The SQL fragments build, at their largest (a full batch of the widest
// values), payloads NOTIFY takes and Go decodes to the same values.
func TestNotifySQLPayloadsDecode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	queue := strings.Repeat("q", 64) // the longest queue name the engine accepts
	var payload string
	err := b.db.SQL.QueryRowContext(ctx, `SELECT `+store.SQLEventsPayload+` FROM (
		SELECT 9223372036854775807 - g AS id, 9223372036854775806 AS run_id, 'interrupted' AS from_status,
			'interrupted' AS to_status, $1::text AS queue, -2147483648 AS attempt, 9223372036854775805 AS held_by
		FROM generate_series(1, $2::int) g ORDER BY g) x`, queue, store.EventsPerPayload).Scan(&payload)
	require.NoError(t, err)
	require.Less(t, len(payload), store.MaxPayload)
	ev, err := store.DecodeEvents(payload)
	require.NoError(t, err)
	require.Len(t, ev.Transitions, store.EventsPerPayload)
	for i, tr := range ev.Transitions {
		require.Equal(t, store.TransitionNote{TaskID: 9223372036854775807 - int64(i+1), RunID: 9223372036854775806,
			From: "interrupted", To: "interrupted", Queue: queue, Attempt: -2147483648, WorkerID: 9223372036854775805}, tr)
	}

	err = b.db.SQL.QueryRowContext(ctx, `SELECT `+store.SQLEventsPayload+` FROM (
		SELECT 1 AS id, 2 AS run_id, NULL::text AS from_status, 'ready' AS to_status, 'default' AS queue, 0 AS attempt, NULL::bigint AS held_by) x`).Scan(&payload)
	require.NoError(t, err)
	ev, err = store.DecodeEvents(payload)
	require.NoError(t, err)
	require.Equal(t, []store.TransitionNote{{TaskID: 1, RunID: 2, To: "ready", Queue: "default"}}, ev.Transitions)

	err = b.db.SQL.QueryRowContext(ctx, `SELECT `+store.SQLTakenPayload+` FROM (
		SELECT 9223372036854775807 - g AS id, -2147483648 AS attempt FROM generate_series(1, $1::int) g ORDER BY g) x`, store.TaskIDsPerPayload).Scan(&payload)
	require.NoError(t, err)
	require.Less(t, len(payload), store.MaxPayload)
	ctl, err := store.DecodeControl(payload)
	require.NoError(t, err)
	require.Equal(t, store.ControlTaken, ctl.Kind)
	require.Len(t, ctl.TaskIDs, store.TaskIDsPerPayload)
	require.Equal(t, int64(9223372036854775806), ctl.TaskIDs[0])
	require.Len(t, ctl.Attempts, store.TaskIDsPerPayload)
	require.Equal(t, -2147483648, ctl.Attempts[0])
}

// Every statement that announces something is heard, through a real
// listener, as the typed message of its channel with the values written.
func TestNotifyStatementsAreHeardAsTypedMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	heard := map[string]chan string{}
	for _, ch := range []string{b.st.EventsChannel(), b.st.ReadyChannel(), b.st.ControlChannel()} {
		heard[ch] = make(chan string, 100)
	}
	ln, err := store.Listen(ctx, store.ListenParams{DSN: b.db.URL, Logger: slog.New(slog.DiscardHandler),
		Channels: []string{b.st.EventsChannel(), b.st.ReadyChannel(), b.st.ControlChannel()},
		OnNotify: func(n store.Notification) { heard[n.Channel] <- n.Payload }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	require.NoError(t, b.st.EventListenerKeep(ctx, "test", time.Minute))

	next := func(channel string) string {
		t.Helper()
		return receive(t, heard[channel], channel)
	}
	events := func() []store.TransitionNote {
		t.Helper()
		m, err := store.DecodeEvents(next(b.st.EventsChannel()))
		require.NoError(t, err)
		return m.Transitions
	}
	control := func() store.ControlMessage {
		t.Helper()
		m, err := store.DecodeControl(next(b.st.ControlChannel()))
		require.NoError(t, err)
		return m
	}
	ready := func() string {
		t.Helper()
		m, err := store.DecodeReady(next(b.st.ReadyChannel()))
		require.NoError(t, err)
		return m.Queue
	}

	// Insert: every task created (no from, no worker), the root ready.
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{diamond()})
	require.NoError(t, err)
	run := res[0].ID
	tasks, err := b.st.TaskListByRun(ctx, run)
	require.NoError(t, err)
	want := make([]store.TransitionNote, len(tasks))
	for i, tk := range tasks {
		want[i] = store.TransitionNote{TaskID: tk.ID, RunID: run, To: tk.Status, Queue: "default"}
	}
	require.ElementsMatch(t, want, events())
	require.Equal(t, "default", ready())

	// Claim: ready to running, held by the worker, attempt 1.
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	a := claimAll(t, b.st, w, 10)
	require.Len(t, a, 1)
	require.Equal(t, []store.TransitionNote{{TaskID: a[0].ID, RunID: run, From: store.StatusReady, To: store.StatusRunning,
		Queue: "default", Attempt: 1, WorkerID: w}}, events())

	// Cancel by no worker: the holder is told its task was taken.
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning},
		Items: []store.TransitionItem{{TaskID: a[0].ID, To: store.StatusCancelled}}})
	require.NoError(t, err)
	// Then its dependents are skipped, in later statements of the same
	// transaction: each statement announces its own moves.
	got := events()
	require.Equal(t, []store.TransitionNote{{TaskID: a[0].ID, RunID: run, From: store.StatusRunning, To: store.StatusCancelled,
		Queue: "default", Attempt: 1, WorkerID: w}}, got)
	for len(got) < len(tasks) {
		more := events()
		for _, n := range more {
			require.Equal(t, store.StatusNotStarted, n.From)
			require.Equal(t, store.StatusSkipped, n.To)
		}
		got = append(got, more...)
	}
	require.Equal(t, store.ControlMessage{Kind: store.ControlTaken, TaskIDs: []int64{a[0].ID}, Attempts: []int{1}}, control())

	// Queue change: a control message and a wake-up.
	require.NoError(t, b.st.QueueSetPaused(ctx, "default", true))
	require.Equal(t, store.ControlMessage{Kind: store.ControlQueue, Queue: "default"}, control())
	require.Equal(t, "default", ready())

	// Signal.
	require.NoError(t, b.st.ControlNotify(ctx, store.ControlMessage{Kind: store.ControlSignal, TaskIDs: []int64{7, 8}}))
	require.Equal(t, store.ControlMessage{Kind: store.ControlSignal, TaskIDs: []int64{7, 8}}, control())

	// Resuming a run wakes the queues of its ready tasks.
	res, err = b.st.RunInsertMany(ctx, single(1))
	require.NoError(t, err)
	events()
	require.Equal(t, "default", ready())
	_, _, err = b.st.RunSetPaused(ctx, res[0].ID, true)
	require.NoError(t, err)
	_, _, err = b.st.RunSetPaused(ctx, res[0].ID, false)
	require.NoError(t, err)
	require.Equal(t, "default", ready())
}

// A store decides every trigger rule itself (package rule), also bound
// to a caller's transaction: a custom rule releases its task in the same
// transaction as the default rule's, and a rollback undoes both.
func TestStoreDecidesCustomRules(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	p := diamond()
	p.Tasks[1].TriggerRule = json.RawMessage(`{"shorthand":"all_done"}`)
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{p})
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	a := claimAll(t, b.st, w, 10)
	require.Len(t, a, 1)
	done := store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: a[0].ID, To: store.StatusCompleted, Attempt: a[0].Attempt}}}

	tx, err := b.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = b.st.WithTx(tx).Transition(ctx, done)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	require.Equal(t, map[string]string{"a": "running", "b": "not_started", "c": "not_started", "d": "not_started"},
		statuses(t, b.st, res[0].ID))

	tx, err = b.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = b.st.WithTx(tx).Transition(ctx, done)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.Equal(t, map[string]string{"a": "completed", "b": "ready", "c": "ready", "d": "not_started"},
		statuses(t, b.st, res[0].ID))
}

// Transitions are announced on the events channel only while a listener
// row has not expired; the ready channel is announced always. Absence is
// checked through order: notifications arrive in commit order, so the
// first events message after a silent insert must be a later insert's.
func TestEventsAreAnnouncedOnlyWhileSomeoneListens(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	events, ready := make(chan string, 100), make(chan string, 100)
	ln, err := store.Listen(ctx, store.ListenParams{DSN: b.db.URL, Logger: slog.New(slog.DiscardHandler),
		Channels: []string{b.st.EventsChannel(), b.st.ReadyChannel()},
		OnNotify: func(n store.Notification) {
			if n.Channel == b.st.EventsChannel() {
				events <- n.Payload
			} else {
				ready <- n.Payload
			}
		}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	insert := func() int64 {
		t.Helper()
		res, err := b.st.RunInsertMany(ctx, single(1))
		require.NoError(t, err)
		require.Equal(t, "default", receive(t, ready, "ready"), "the ready channel is announced with or without listeners")
		return res[0].ID
	}
	runOfNextEvent := func() int64 {
		t.Helper()
		m, err := store.DecodeEvents(receive(t, events, "events"))
		require.NoError(t, err)
		require.NotEmpty(t, m.Transitions)
		return m.Transitions[0].RunID
	}
	listened := func() bool {
		t.Helper()
		ok, err := b.st.EventsListened(ctx)
		require.NoError(t, err)
		return ok
	}

	require.False(t, listened())
	insert() // nobody listens: no events
	require.NoError(t, b.st.EventListenerKeep(ctx, "a", time.Minute))
	require.True(t, listened())
	heard := insert()
	require.Equal(t, heard, runOfNextEvent(), "the first events message is the insert made while listened")

	// Dropped: silent again.
	require.NoError(t, b.st.EventListenerDrop(ctx, "a"))
	require.False(t, listened())
	insert()
	// Expired rows do not count, and the next keep deletes them.
	require.NoError(t, b.st.EventListenerKeep(ctx, "gone", -time.Second))
	require.False(t, listened())
	insert()
	require.NoError(t, b.st.EventListenerKeep(ctx, "b", time.Minute))
	heard = insert()
	require.Equal(t, heard, runOfNextEvent())
	var holders string
	require.NoError(t, b.db.SQL.QueryRowContext(ctx, "SELECT string_agg(holder, ',' ORDER BY holder) FROM "+pgtest.Schema+".event_listeners").Scan(&holders))
	require.Equal(t, "b", holders, "the expired row was deleted")
}

// A run insert through WithoutWake does not announce its ready queue;
// ReadyNotify does, after. Checked through order, as above.
func TestRunInsertWithoutWakeLeavesTheAnnouncementToTheCaller(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ready := make(chan string, 100)
	ln, err := store.Listen(ctx, store.ListenParams{DSN: b.db.URL, Logger: slog.New(slog.DiscardHandler),
		Channels: []string{b.st.ReadyChannel()}, OnNotify: func(n store.Notification) { ready <- n.Payload }})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	next := func() string {
		t.Helper()
		return receive(t, ready, "ready")
	}
	res, err := b.st.WithoutWake().RunInsertMany(ctx, single(1))
	require.NoError(t, err)
	require.NotZero(t, res[0].ID)
	require.NoError(t, b.st.ReadyNotify(ctx, []string{"other", "default"}))
	require.Equal(t, []string{"other", "default"}, []string{next(), next()}, "the quiet insert announced nothing")
	_, err = b.st.RunInsertMany(ctx, single(1))
	require.NoError(t, err)
	require.Equal(t, "default", next(), "without WithoutWake the insert announces")
}

// receive returns the next payload heard on ch, failing the test after
// 10 s without one.
func receive(t *testing.T, ch <-chan string, channel string) string {
	t.Helper()
	select {
	case p := <-ch:
		return p
	case <-time.After(10 * time.Second):
		t.Fatalf("no notification on %s", channel)
		return ""
	}
}
