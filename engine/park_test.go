package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// countStatus counts the tasks in status.
func countStatus(t testing.TB, e env, status string) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM cairn.tasks WHERE status = $1`, status).Scan(&n))
	return n
}

// slotViolations counts workers that run more tasks than their slots,
// right now.
func slotViolations(t testing.TB, e env) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM cairn.cairn_worker_slots WHERE running > slots`).Scan(&n))
	return n
}

func TestManyTasksParkAndResumeInBatches(t *testing.T) {
	t.Parallel()
	const n, slots = 300, 16
	e := setup(t, func(c *engine.Config) { c.Queues = map[string]engine.QueueConfig{"default": {Slots: slots}} })
	var open atomic.Bool
	var running, maxRunning atomic.Int64
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "park", Tasks: []engine.Task{{Name: "wait",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			if err := h.DeferUntil(ctx, func(context.Context) bool { return open.Load() }, 50*time.Millisecond); err != nil {
				return err
			}
			// Back with a slot: never more of us than slots.
			now := running.Add(1)
			defer running.Add(-1)
			for m := maxRunning.Load(); now > m && !maxRunning.CompareAndSwap(m, now); m = maxRunning.Load() {
			}
			return nil
		}}}}))
	start(t, e.eng)
	ctx := context.Background()
	runs := make([]engine.EnqueueParams, n)
	for i := range runs {
		runs[i] = engine.EnqueueParams{Workflow: "park"}
	}
	_, err := e.eng.EnqueueMany(ctx, runs)
	require.NoError(t, err)
	eventually(t, 60*time.Second, "every task deferred", func() bool { return countStatus(t, e, store.StatusDeferred) == n })
	park, resume, handoff := engine.DeferWrites(e.eng)
	require.Zero(t, resume+handoff)
	// Claims come 8 at a time (half the slots), and parking waits for the
	// handlers of a claim to gather: far fewer statements than tasks.
	require.LessOrEqual(t, park, int64(n/2), "running -> deferred statements for %d tasks", n)
	// A handler joins the shared timer just after its park commits.
	eventually(t, 10*time.Second, "every parked task waits on the shared timer",
		func() bool { return engine.ParkedWakeups(e.eng) == n })
	// Slots freed by parking went to new work in the same transactions.
	require.Positive(t, engine.ClaimedOnPark(e.eng))

	// All conditions turn true at once: slots are re-acquired FIFO, 16 at
	// a time, and the resume writes are batched across them.
	open.Store(true)
	done := make(chan struct{})
	var violations atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			var n int64
			if err := e.db.SQL.QueryRow(`SELECT count(*) FROM cairn.cairn_worker_slots WHERE running > slots`).Scan(&n); err == nil {
				violations.Add(n)
			}
		}
	}()
	eventually(t, 60*time.Second, "every task completed", func() bool { return countStatus(t, e, store.StatusCompleted) == n })
	close(done)
	wg.Wait()
	require.Zero(t, violations.Load(), "a worker ran more tasks than slots")
	require.LessOrEqual(t, maxRunning.Load(), int64(slots))
	_, resume, handoff = engine.DeferWrites(e.eng)
	t.Logf("%d tasks: %d park statements, %d resume statements, %d completion writes that also resumed", n, park, resume, handoff)
	resume += handoff
	require.LessOrEqual(t, resume, int64(n/2), "deferred -> running statements for %d tasks", n)
	require.Zero(t, engine.ParkedWakeups(e.eng))
	var events int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM cairn.task_events WHERE from_status = 'deferred' AND to_status = 'running'`).Scan(&events))
	require.Equal(t, n, events, "one event per resumed task")
}

func TestResumeOfTaskTakenWhileParkedIsLost(t *testing.T) {
	t.Parallel()
	// No heartbeat during the test: only the resume's compare-and-set can
	// find out that the rows were taken.
	e := setup(t, func(c *engine.Config) {
		c.Queues = map[string]engine.QueueConfig{"default": {Slots: 4}}
		c.HeartbeatInterval = time.Hour
		c.LeaseDuration = 2 * time.Hour
	})
	var open atomic.Bool
	var mu sync.Mutex
	results := map[int64]error{}
	ended := make(chan struct{}, 4)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "park", Tasks: []engine.Task{{Name: "wait",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			err := h.DeferUntil(ctx, func(context.Context) bool { return open.Load() }, time.Hour)
			mu.Lock()
			results[h.TaskID()] = err
			mu.Unlock()
			ended <- struct{}{}
			return err
		}}}}))
	start(t, e.eng)
	ctx := context.Background()
	var ids []int64
	for range 4 {
		r, err := e.eng.Enqueue(ctx, "park", nil)
		require.NoError(t, err)
		ids = append(ids, taskByName(t, e.st, r.ID, "wait").ID)
	}
	eventually(t, 20*time.Second, "every task deferred", func() bool { return countStatus(t, e, store.StatusDeferred) == 4 })
	// Two rows are taken behind the engine's back (no notification), as a
	// rescuer in another process would.
	_, err := e.db.SQL.Exec(`UPDATE cairn.tasks SET status = 'cancelled', worker_id = NULL WHERE id IN ($1, $2)`, ids[0], ids[1])
	require.NoError(t, err)
	open.Store(true)
	for _, id := range ids {
		require.NoError(t, e.eng.Signal(ctx, id))
	}
	for range 4 {
		select {
		case <-ended:
		case <-time.After(20 * time.Second):
			t.Fatal("parked handlers did not come back")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i, id := range ids {
		if i < 2 {
			require.ErrorIs(t, results[id], engine.ErrTaskLost, "task %d was taken while parked", id)
		} else {
			require.NoError(t, results[id], "task %d", id)
		}
	}
	for i, id := range ids {
		want := store.StatusCompleted
		if i < 2 {
			want = store.StatusCancelled
		}
		eventually(t, 20*time.Second, "task settled", func() bool {
			tk, err := e.st.TaskGet(ctx, id)
			require.NoError(t, err)
			return tk.Status == want
		})
	}
	require.Zero(t, slotViolations(t, e))
}

func TestCompletionHandsItsSlotToDeferredTaskFIFO(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) {
		c.Queues = map[string]engine.QueueConfig{"default": {Slots: 1}}
		c.HeartbeatInterval = time.Hour // only the compare-and-set finds the taken row
		c.LeaseDuration = 2 * time.Hour
	})
	var open atomic.Bool
	holding, release := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	results := map[int64]error{}
	ended := make(chan struct{}, 2)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "park", Tasks: []engine.Task{{Name: "wait",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			err := h.DeferUntil(ctx, func(context.Context) bool { return open.Load() }, time.Hour)
			mu.Lock()
			results[h.TaskID()] = err
			mu.Unlock()
			ended <- struct{}{}
			return err
		}}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "hold", Tasks: []engine.Task{{Name: "hold",
		Run: func(context.Context, *engine.TaskHandle) error {
			close(holding)
			<-release
			return nil
		}}}}))
	start(t, e.eng)
	ctx := context.Background()
	var ids []int64
	for range 2 {
		r, err := e.eng.Enqueue(ctx, "park", nil)
		require.NoError(t, err)
		id := taskByName(t, e.st, r.ID, "wait").ID
		ids = append(ids, id)
		eventually(t, 20*time.Second, "task deferred", func() bool {
			tk, err := e.st.TaskGet(ctx, id)
			require.NoError(t, err)
			return tk.Status == store.StatusDeferred
		})
	}
	hold, err := e.eng.Enqueue(ctx, "hold", nil)
	require.NoError(t, err)
	select {
	case <-holding:
	case <-time.After(20 * time.Second):
		t.Fatal("the slot was never used")
	}
	// Both conditions hold; they queue for the only slot, first ids[0].
	open.Store(true)
	for i, id := range ids {
		require.NoError(t, e.eng.Signal(ctx, id))
		eventually(t, 10*time.Second, "deferred task to wait for the slot", func() bool {
			return engine.SlotWaiters(e.eng, "default") == i+1
		})
	}
	// The first one is taken behind the engine's back while it waits.
	_, err = e.db.SQL.Exec(`UPDATE cairn.tasks SET status = 'cancelled', worker_id = NULL WHERE id = $1`, ids[0])
	require.NoError(t, err)
	close(release)
	for range 2 {
		select {
		case <-ended:
		case <-time.After(20 * time.Second):
			t.Fatal("waiting handlers did not come back")
		}
	}
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, hold.ID, 20*time.Second).Status)
	mu.Lock()
	require.ErrorIs(t, results[ids[0]], engine.ErrTaskLost, "the task taken while waiting")
	require.NoError(t, results[ids[1]])
	mu.Unlock()
	eventually(t, 20*time.Second, "resumed task completed", func() bool {
		tk, err := e.st.TaskGet(ctx, ids[1])
		require.NoError(t, err)
		return tk.Status == store.StatusCompleted
	})
	_, resume, handoff := engine.DeferWrites(e.eng)
	require.Zero(t, resume, "no resume write of its own: the slot came with a completion write")
	require.Equal(t, int64(2), handoff, "the hold task's write handed the slot to the lost task, whose write handed it on")
	require.Zero(t, slotViolations(t, e))
}
