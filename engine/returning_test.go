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

// A parked task of a key with Max 1 that may run on while its key is
// full comes back before a task of its key enqueued meanwhile: the place
// the running task frees is its, not the newcomer's, so new claims cannot
// starve a returning task (see migration 028).
func TestReturningKeyedTaskRunsBeforeANewOneOfItsKey(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var (
		mu       sync.Mutex
		order    []string
		mayGo    atomic.Bool
		releaseB = make(chan struct{})
	)
	record := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	handler := func(ctx context.Context, h *engine.TaskHandle) error {
		var in struct {
			Role string `json:"role"`
		}
		if err := h.Input(&in); err != nil {
			return err
		}
		switch in.Role {
		case "parker":
			if err := h.DeferUntil(ctx, func(context.Context) bool { return mayGo.Load() }, time.Hour); err != nil {
				return err
			}
		case "holder":
			select {
			case <-releaseB:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		record(in.Role)
		return nil
	}
	wf := engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a", Run: handler,
		Concurrency: &engine.Concurrency{Group: "g", Key: "k", Max: 1}}}}
	eng := keyedEngines(t, db, 1, 4, wf)[0]
	start(t, eng)
	ctx := context.Background()
	taskStatus := func(runID int64) (status string, stamped bool) {
		require.NoError(t, db.SQL.QueryRow(`SELECT status, resume_wanted_at IS NOT NULL FROM cairn.tasks WHERE run_id = $1`, runID).
			Scan(&status, &stamped))
		return status, stamped
	}

	a, err := eng.Enqueue(ctx, "w", map[string]any{"k": "x", "role": "parker"})
	require.NoError(t, err)
	eventually(t, 10*time.Second, "the parker parked", func() bool { s, _ := taskStatus(a.ID); return s == "deferred" })
	b, err := eng.Enqueue(ctx, "w", map[string]any{"k": "x", "role": "holder"})
	require.NoError(t, err)
	eventually(t, 10*time.Second, "the holder took the key's place", func() bool { s, _ := taskStatus(b.ID); return s == "running" })

	// The parker may run on, but its key is full: it waits for the place.
	mayGo.Store(true)
	var aTask int64
	require.NoError(t, db.SQL.QueryRow(`SELECT id FROM cairn.tasks WHERE run_id = $1`, a.ID).Scan(&aTask))
	require.NoError(t, eng.Signal(ctx, aTask))
	eventually(t, 10*time.Second, "the parker waits for its key", func() bool { _, st := taskStatus(a.ID); return st })

	_, err = eng.Enqueue(ctx, "w", map[string]any{"k": "x", "role": "newcomer"})
	require.NoError(t, err)
	close(releaseB)
	waitCompleted(t, db, 3, 30*time.Second)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"holder", "parker", "newcomer"}, order, "the returning task comes back before the newcomer of its key")
}
