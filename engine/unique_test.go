package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// uniqueEnv is an engine with workflow "ok" (completes) and "bad" (fails).
func uniqueEnv(t *testing.T, mutate func(*engine.Config)) env {
	t.Helper()
	e := setup(t, mutate)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "ok", Tasks: []engine.Task{{Name: "a", Run: noop}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "bad", Tasks: []engine.Task{{Name: "a",
		Run: func(context.Context, *engine.TaskHandle) error { return engine.Permanent(errors.New("no")) }}}}))
	return e
}

// expireWindow moves run id's uniqueness window into the past, as if its
// d had passed.
func expireWindow(t *testing.T, e env, id int64) {
	t.Helper()
	res, err := e.db.SQL.Exec(`UPDATE cairn.run_rows SET unique_until = now() - interval '1 second' WHERE id = $1 AND unique_until IS NOT NULL`, id)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "run %d has a window", id)
}

func countRuns(t *testing.T, e env) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM cairn.runs`).Scan(&n))
	return n
}

// TestWithUniqueForHoldsAfterFinish: for d after a run with the key was
// created, enqueueing again returns it whether it completed or failed,
// with or without WithUniqueFor; after d a new run is made.
func TestWithUniqueForHoldsAfterFinish(t *testing.T) {
	t.Parallel()
	e := uniqueEnv(t, nil)
	start(t, e.eng)
	ctx := context.Background()
	for _, wf := range []string{"ok", "bad"} {
		key := "report:" + wf
		first, err := e.eng.Enqueue(ctx, wf, nil, engine.WithKey(key), engine.WithUniqueFor(time.Hour))
		require.NoError(t, err)
		require.False(t, first.Existing)
		run := waitRun(t, e.st, first.ID, 20*time.Second)
		want := map[string]string{"ok": store.RunCompleted, "bad": store.RunFailed}[wf]
		require.Equal(t, want, run.Status)

		for _, opts := range [][]engine.EnqueueOption{
			{engine.WithKey(key), engine.WithUniqueFor(time.Hour)},
			{engine.WithKey(key), engine.WithUniqueFor(time.Second)},
			{engine.WithKey(key)},
		} {
			again, err := e.eng.Enqueue(ctx, wf, nil, opts...)
			require.NoError(t, err)
			require.True(t, again.Existing, wf)
			require.Equal(t, first.ID, again.ID, wf)
		}

		expireWindow(t, e, first.ID)
		fresh, err := e.eng.Enqueue(ctx, wf, nil, engine.WithKey(key), engine.WithUniqueFor(time.Hour))
		require.NoError(t, err)
		require.False(t, fresh.Existing, "after d the key makes a new run")
		require.NotEqual(t, first.ID, fresh.ID)
		waitRun(t, e.st, fresh.ID, 20*time.Second)
	}
	require.Equal(t, 4, countRuns(t, e))
}

// TestWithUniqueForConcurrentEnqueues: 20 concurrent enqueues of one key
// get one run and exactly one of them made it: while the key is new,
// after its run finished (within d), and after d.
func TestWithUniqueForConcurrentEnqueues(t *testing.T) {
	t.Parallel()
	e := uniqueEnv(t, nil)
	ctx := context.Background()
	const n = 20
	enqueueAll := func() (int64, int) {
		t.Helper()
		runs := make([]*engine.Run, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		ready := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-ready
				runs[i], errs[i] = e.eng.Enqueue(ctx, "ok", map[string]int{"i": i},
					engine.WithKey("order:42"), engine.WithUniqueFor(time.Hour))
			}()
		}
		close(ready)
		wg.Wait()
		made := 0
		for i := range n {
			require.NoError(t, errs[i])
			require.Equal(t, runs[0].ID, runs[i].ID, "enqueue %d", i)
			if !runs[i].Existing {
				made++
			}
		}
		return runs[0].ID, made
	}

	first, made := enqueueAll()
	require.Equal(t, 1, made, "exactly one enqueue made the run")
	require.Equal(t, 1, countRuns(t, e))

	start(t, e.eng)
	waitRun(t, e.st, first, 20*time.Second)
	id, made := enqueueAll()
	require.Equal(t, first, id, "the finished run holds its key within d")
	require.Zero(t, made)
	require.Equal(t, 1, countRuns(t, e))

	expireWindow(t, e, first)
	second, made := enqueueAll()
	require.NotEqual(t, first, second)
	require.Equal(t, 1, made, "after d exactly one enqueue made a new run")
	require.Equal(t, 2, countRuns(t, e))
}

// TestWithUniqueForEnqueueManyAndTx: duplicates inside one EnqueueMany
// settle on one run; EnqueueTx holds the key from its commit, and a
// rolled-back one holds nothing.
func TestWithUniqueForEnqueueManyAndTx(t *testing.T) {
	t.Parallel()
	e := uniqueEnv(t, nil)
	start(t, e.eng)
	ctx := context.Background()
	win := []engine.EnqueueOption{engine.WithKey("k"), engine.WithUniqueFor(time.Hour)}
	first, err := e.eng.Enqueue(ctx, "ok", nil, win...)
	require.NoError(t, err)
	waitRun(t, e.st, first.ID, 20*time.Second)

	runs, err := e.eng.EnqueueMany(ctx, []engine.EnqueueParams{
		{Workflow: "ok", Options: win},
		{Workflow: "ok", Options: []engine.EnqueueOption{engine.WithKey("m"), engine.WithUniqueFor(time.Hour)}},
		{Workflow: "ok", Options: []engine.EnqueueOption{engine.WithKey("m")}},
		{Workflow: "ok", Options: []engine.EnqueueOption{engine.WithKey("m"), engine.WithUniqueFor(time.Minute)}},
	})
	require.NoError(t, err)
	require.True(t, runs[0].Existing, "the finished run in its window")
	require.Equal(t, first.ID, runs[0].ID)
	require.False(t, runs[1].Existing)
	for _, r := range runs[2:] {
		require.True(t, r.Existing)
		require.Equal(t, runs[1].ID, r.ID)
	}
	require.Equal(t, 2, countRuns(t, e))

	// A rolled-back EnqueueTx holds nothing.
	tx, err := e.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	gone, err := e.eng.EnqueueTx(ctx, tx, "ok", nil, engine.WithKey("tx"), engine.WithUniqueFor(time.Hour))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	// A committed one holds the key, also after its run finished.
	tx, err = e.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	held, err := e.eng.EnqueueTx(ctx, tx, "ok", nil, engine.WithKey("tx"), engine.WithUniqueFor(time.Hour))
	require.NoError(t, err)
	require.False(t, held.Existing, "the rolled-back run left no key behind")
	require.NotEqual(t, gone.ID, held.ID)
	same, err := e.eng.EnqueueTx(ctx, tx, "ok", nil, engine.WithKey("tx"), engine.WithUniqueFor(time.Hour))
	require.NoError(t, err)
	require.True(t, same.Existing, "inside the same transaction")
	require.Equal(t, held.ID, same.ID)
	require.NoError(t, tx.Commit())
	waitRun(t, e.st, held.ID, 20*time.Second)
	tx, err = e.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	after, err := e.eng.EnqueueTx(ctx, tx, "ok", nil, engine.WithKey("tx"))
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.True(t, after.Existing)
	require.Equal(t, held.ID, after.ID)
}

// TestWithUniqueForRefusesBadWindow: a window without a key, or one that
// is not positive, is ErrInvalidInput naming unique_for, and nothing is
// written.
func TestWithUniqueForRefusesBadWindow(t *testing.T) {
	t.Parallel()
	e := uniqueEnv(t, func(c *engine.Config) { c.NoWorker = true })
	ctx := context.Background()
	for name, opts := range map[string][]engine.EnqueueOption{
		"no key":   {engine.WithUniqueFor(time.Hour)},
		"zero":     {engine.WithKey("k"), engine.WithUniqueFor(0)},
		"negative": {engine.WithKey("k"), engine.WithUniqueFor(-time.Second)},
	} {
		_, err := e.eng.Enqueue(ctx, "ok", nil, opts...)
		require.ErrorIs(t, err, engine.ErrInvalidInput, name)
		require.ErrorContains(t, err, "unique_for", name)
		_, err = e.eng.EnqueueMany(ctx, []engine.EnqueueParams{{Workflow: "ok"}, {Workflow: "ok", Options: opts}})
		require.ErrorIs(t, err, engine.ErrInvalidInput, name)
		require.ErrorContains(t, err, "run 1: ", name)
	}
	require.Zero(t, countRuns(t, e))
}

// TestWithUniqueForPruner: the pruner keeps a finished run while its
// window holds (the key keeps returning it) and prunes it after; the key
// then makes a fresh run rather than pointing at a missing one.
func TestWithUniqueForPruner(t *testing.T) {
	t.Parallel()
	e := uniqueEnv(t, func(c *engine.Config) { c.NoWorker = true; c.Retention = time.Hour })
	ctx := context.Background()
	win := []engine.EnqueueOption{engine.WithKey("k"), engine.WithUniqueFor(30 * 24 * time.Hour)}
	first, err := e.eng.Enqueue(ctx, "ok", nil, win...)
	require.NoError(t, err)
	require.NoError(t, e.eng.CancelRun(ctx, first.ID))
	_, err = e.db.SQL.Exec(`UPDATE cairn.run_rows SET created_at = now() - interval '3 days', finished_at = now() - interval '2 days' WHERE id = $1`, first.ID)
	require.NoError(t, err)

	require.NoError(t, engine.PruneOnce(ctx, e.eng))
	_, err = e.st.RunGet(ctx, first.ID)
	require.NoError(t, err, "a run in its window is not pruned")
	again, err := e.eng.Enqueue(ctx, "ok", nil, win...)
	require.NoError(t, err)
	require.True(t, again.Existing)
	require.Equal(t, first.ID, again.ID)

	expireWindow(t, e, first.ID)
	require.NoError(t, engine.PruneOnce(ctx, e.eng))
	_, err = e.st.RunGet(ctx, first.ID)
	require.ErrorIs(t, err, store.ErrNotFound, "pruned once its window has passed")
	fresh, err := e.eng.Enqueue(ctx, "ok", nil, win...)
	require.NoError(t, err)
	require.False(t, fresh.Existing)
	_, err = e.st.RunGet(ctx, fresh.ID)
	require.NoError(t, err)
}
