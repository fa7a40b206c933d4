package engine_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store/pgtest"
)

// keyedEngines starts n engines on db, each registering wf.
func keyedEngines(t *testing.T, db *pgtest.DB, n, slots int, wf engine.Workflow) []*engine.Engine {
	t.Helper()
	var out []*engine.Engine
	for range n {
		cfg := fastConfig(db, t)
		cfg.Queues = map[string]engine.QueueConfig{"default": {Slots: slots}}
		// No engine here dies: a long lease keeps a heartbeat that a
		// loaded machine delays from losing a task to the rescuer (a
		// 2 s lease ran out once under make test, and the task it
		// interrupted never completed).
		cfg.LeaseDuration = 30 * time.Second
		eng := newEngine(t, db, cfg)
		require.NoError(t, eng.Register(wf))
		out = append(out, eng)
	}
	return out
}

// keyEvent is one move into or out of running of a task with a key.
type keyEvent struct {
	key   string
	delta int
	at    time.Time
}

// runningReplay replays, in event order, every move into and out of
// running of tasks with a concurrency key and returns the most running
// at once per key.
func runningReplay(t *testing.T, db *pgtest.DB) map[string]int {
	t.Helper()
	rows, err := db.SQL.Query(`SELECT t.conc_key,
			CASE WHEN e.to_status = 'running' THEN 1 ELSE -1 END
		FROM cairn.task_events e JOIN cairn.tasks t ON t.id = e.task_id
		WHERE t.conc_key IS NOT NULL AND (e.to_status = 'running') <> (e.from_status = 'running')
		ORDER BY e.id`)
	require.NoError(t, err)
	defer rows.Close()
	cur, peak := map[string]int{}, map[string]int{}
	for rows.Next() {
		var ev keyEvent
		require.NoError(t, rows.Scan(&ev.key, &ev.delta))
		cur[ev.key] += ev.delta
		peak[ev.key] = max(peak[ev.key], cur[ev.key])
	}
	require.NoError(t, rows.Err())
	return peak
}

func TestConcurrencyBoundHoldsAcrossEngines(t *testing.T) {
	t.Parallel()
	// Max 2 over 18 slots: the limit binds at once. Max 20 over 36 slots:
	// a key's room covers whole claims (up to 12 tasks) until its running
	// tasks near the limit.
	for _, c := range []struct{ max, slots int }{{2, 6}, {20, 12}} {
		t.Run(fmt.Sprintf("max %d", c.max), func(t *testing.T) {
			t.Parallel()
			concurrencyBoundHolds(t, c.max, c.slots)
		})
	}
}

func concurrencyBoundHolds(t *testing.T, maxRunning, slots int) {
	db := pgtest.New(t)
	var mu sync.Mutex
	running, peak := map[string]int{}, map[string]int{}
	handler := func(ctx context.Context, h *engine.TaskHandle) error {
		var in struct {
			Customer string `json:"customer"`
			Defer    bool   `json:"defer"`
		}
		if err := h.Input(&in); err != nil {
			return err
		}
		enter := func() {
			mu.Lock()
			running[in.Customer]++
			peak[in.Customer] = max(peak[in.Customer], running[in.Customer])
			mu.Unlock()
		}
		leave := func() { mu.Lock(); running[in.Customer]--; mu.Unlock() }
		enter()
		time.Sleep(10 * time.Millisecond) // the task's work, not a wait for anything
		if in.Defer {
			// Parked, the task gives its key's place back; it takes it
			// again before it runs on.
			leave()
			first := true
			if err := h.DeferUntil(ctx, func(context.Context) bool { ok := !first; first = false; return ok }, 20*time.Millisecond); err != nil {
				return err
			}
			enter()
		}
		leave()
		return nil
	}
	wf := engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: handler,
		Concurrency: &engine.Concurrency{Group: "stripe", Key: "customer", Max: maxRunning}}}}
	engines := keyedEngines(t, db, 3, slots, wf)
	params := make([]engine.EnqueueParams, 30*maxRunning+30)
	for i := range params {
		params[i] = engine.EnqueueParams{Workflow: "w", Input: map[string]any{"customer": fmt.Sprintf("c%d", i%3), "defer": i%5 == 0}}
	}
	_, err := engines[0].EnqueueMany(context.Background(), params)
	require.NoError(t, err)
	for _, eng := range engines {
		start(t, eng)
	}
	waitCompleted(t, db, len(params), 60*time.Second)
	for key, p := range runningReplay(t, db) {
		require.LessOrEqual(t, p, maxRunning, "key %q: more running at once than Max, replayed from task_events", key)
	}
	mu.Lock()
	for c, p := range peak {
		require.LessOrEqual(t, p, maxRunning, "customer %s ran more than Max at once", c)
	}
	mu.Unlock()
	var attempts, held int
	require.NoError(t, db.SQL.QueryRow(`SELECT max(attempt) FROM cairn.tasks`).Scan(&attempts))
	require.Equal(t, 1, attempts, "waiting for a place spends no attempt")
	require.NoError(t, db.SQL.QueryRow(`SELECT coalesce(sum(running), 0) FROM cairn.cairn_flow_keys`).Scan(&held))
	require.Zero(t, held, "every place is given back")
	var view int
	require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM cairn.cairn_flow_keys WHERE kind = 'c' AND grp = 'stripe' AND max_running = $1`, maxRunning).Scan(&view))
	require.Equal(t, 3, view, "one key per customer in cairn_flow_keys")
	pgtest.CheckRelations(t, db.SQL, "after the keyed runs")
}

func TestRateLimitHoldsInEveryWindow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const limit, per = 4, 500 * time.Millisecond
	wf := engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a",
		Run:       func(context.Context, *engine.TaskHandle) error { return nil },
		RateLimit: &engine.RateLimit{Group: "api", Key: "account", Limit: limit, Per: per}}}}
	engines := keyedEngines(t, db, 3, 4, wf)
	params := make([]engine.EnqueueParams, 16)
	for i := range params {
		params[i] = engine.EnqueueParams{Workflow: "w", Input: map[string]any{"account": "acme"}}
	}
	_, err := engines[0].EnqueueMany(context.Background(), params)
	require.NoError(t, err)
	for _, eng := range engines {
		start(t, eng)
	}
	waitCompleted(t, db, len(params), 30*time.Second)
	rows, err := db.SQL.Query(`SELECT e.at FROM cairn.task_events e JOIN cairn.tasks t ON t.id = e.task_id
		WHERE e.from_status = 'ready' AND e.to_status = 'running' ORDER BY e.at`)
	require.NoError(t, err)
	var starts []time.Time
	for rows.Next() {
		var at time.Time
		require.NoError(t, rows.Scan(&at))
		starts = append(starts, at)
	}
	require.NoError(t, rows.Close())
	require.Len(t, starts, len(params))
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	for i := 0; i+limit < len(starts); i++ {
		require.GreaterOrEqual(t, starts[i+limit].Sub(starts[i]), per,
			"starts %d..%d fall inside one window of %s", i, i+limit, per)
	}
	var attempts, moved int
	require.NoError(t, db.SQL.QueryRow(`SELECT max(attempt) FROM cairn.tasks`).Scan(&attempts))
	require.Equal(t, 1, attempts, "a task held back spends no attempt")
	require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM cairn.tasks WHERE available_at > created_at`).Scan(&moved))
	require.Positive(t, moved, "held-back tasks wait with available_at moved to when they may start")
}

func TestKeyedClaimsTakeTurnsAcrossKeys(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var mu sync.Mutex
	var order []string
	wf := engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a",
		Concurrency: &engine.Concurrency{Key: "tenant", Max: 1000},
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			var in struct{ Tenant string }
			if err := h.Input(&in); err != nil {
				return err
			}
			mu.Lock()
			order = append(order, in.Tenant)
			mu.Unlock()
			return nil
		}}}}
	engines := keyedEngines(t, db, 3, 8, wf)
	ctx := context.Background()
	params := make([]engine.EnqueueParams, 0, 1010)
	for range 1000 {
		params = append(params, engine.EnqueueParams{Workflow: "w", Input: map[string]string{"tenant": "A"}})
	}
	for range 10 {
		params = append(params, engine.EnqueueParams{Workflow: "w", Input: map[string]string{"tenant": "B"}})
	}
	_, err := engines[0].EnqueueMany(ctx, params)
	require.NoError(t, err)
	for _, eng := range engines {
		start(t, eng)
	}
	eventually(t, 60*time.Second, "all tasks ran", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == len(params) })
	mu.Lock()
	defer mu.Unlock()
	lastB := 0
	for i, k := range order {
		if k == "B" {
			lastB = i
		}
	}
	// Turns: B's tasks go beside A's in the first claims of the three
	// engines (up to 64 a key per turn), not after A's thousand.
	require.Less(t, lastB, 200, "B's last task started after %d tasks", lastB)
}

func TestFlowDefinitionsAreChecked(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	run := func(context.Context, *engine.TaskHandle) error { return nil }
	for _, tc := range []struct {
		field string
		task  engine.Task
	}{
		{"Concurrency.Max", engine.Task{Concurrency: &engine.Concurrency{Max: 0}}},
		{"RateLimit.Limit", engine.Task{RateLimit: &engine.RateLimit{Limit: 0, Per: time.Second}}},
		{"RateLimit.Per", engine.Task{RateLimit: &engine.RateLimit{Limit: 1}}},
		{"RateLimit.Group", engine.Task{RateLimit: &engine.RateLimit{Key: "account", Limit: 1, Per: time.Second}}},
		{"Concurrency.Key", engine.Task{Concurrency: &engine.Concurrency{Key: "a..b", Max: 1}}},
		{"Concurrency.Group", engine.Task{Concurrency: &engine.Concurrency{Group: "a\x1fb", Max: 1}}},
	} {
		tc.task.Name, tc.task.Run = "t", run
		err := e.eng.Register(engine.Workflow{Name: "bad", Tasks: []engine.Task{tc.task}})
		require.ErrorIs(t, err, engine.ErrInvalidWorkflow, tc.field)
		require.ErrorContains(t, err, tc.field)
	}
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "ok", Tasks: []engine.Task{{Name: "t", Run: run,
		Concurrency: &engine.Concurrency{Key: "customer.id", Max: 1}}}}))
	_, err := e.eng.Enqueue(context.Background(), "ok", map[string]any{"customer": map[string]any{"name": "x"}})
	require.ErrorIs(t, err, engine.ErrInvalidInput)
	require.ErrorContains(t, err, "customer.id")
	var n int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM cairn.runs`).Scan(&n))
	require.Zero(t, n, "a refused enqueue writes nothing")
	r, err := e.eng.Enqueue(context.Background(), "ok", map[string]any{"customer": map[string]any{"id": 42}})
	require.NoError(t, err)
	tk := taskByName(t, e.st, r.ID, "t")
	require.NotNil(t, tk.ConcKey)
	require.Equal(t, "c\x1fok.t\x1f42", *tk.ConcKey)
}
