package engine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestPriorityOrdersClaims(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.Queues = map[string]engine.QueueConfig{"default": {Slots: 1}} })
	var mu sync.Mutex
	var order []int
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			var in struct{ P int }
			if err := h.Input(&in); err != nil {
				return err
			}
			mu.Lock()
			order = append(order, in.P)
			mu.Unlock()
			return nil
		}}}}))
	ctx := context.Background()
	require.NoError(t, e.st.QueueEnsure(ctx, []string{"default"}))
	require.NoError(t, e.eng.PauseQueue(ctx, "default"))
	var last *engine.Run
	for _, p := range []int{5, 0, 3, -2, 3} {
		r, err := e.eng.Enqueue(ctx, "w", map[string]int{"P": p}, engine.WithPriority(p))
		require.NoError(t, err)
		last = r
	}
	start(t, e.eng)
	require.NoError(t, e.eng.ResumeQueue(ctx, "default"))
	waitRun(t, e.st, last.ID, 20*time.Second)
	eventually(t, 10*time.Second, "all runs", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 5 })
	require.Equal(t, []int{-2, 0, 3, 3, 5}, order)
}

func TestQueueCapHoldsAcrossEngines(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var running, peak atomic.Int32
	release := make(chan struct{})
	handler := func(ctx context.Context, h *engine.TaskHandle) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer running.Add(-1)
		select {
		case <-release:
		case <-time.After(50 * time.Millisecond):
		}
		return nil
	}
	var engines []*engine.Engine
	for range 2 {
		cfg := fastConfig(db, t)
		cfg.Queues = map[string]engine.QueueConfig{"capped": {Slots: 4, MaxRunning: 2}}
		eng := newEngine(t, db, cfg)
		require.NoError(t, eng.Register(engine.Workflow{Name: "w", Queue: "capped", Tasks: []engine.Task{{Name: "a", Run: handler}}}))
		engines = append(engines, eng)
	}
	params := make([]engine.EnqueueParams, 40)
	for i := range params {
		params[i] = engine.EnqueueParams{Workflow: "w"}
	}
	_, err := engines[0].EnqueueMany(context.Background(), params)
	require.NoError(t, err)
	for _, eng := range engines {
		start(t, eng)
	}
	waitCompleted(t, db, 40, 60*time.Second)
	close(release)
	require.LessOrEqual(t, peak.Load(), int32(2), "more tasks ran at once than the queue cap")
	require.Equal(t, int32(2), peak.Load(), "the cap, not less, is used")
	q, err := newStore(t, db, "").QueueGet(context.Background(), "capped")
	require.NoError(t, err)
	require.Equal(t, 2, *q.MaxRunning)
}
