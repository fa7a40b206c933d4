package engine_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store/pgtest"
)

// debounceEnv is an engine with workflow "d", whose task sends the n of
// its input on got and, while hold is open, waits on it.
func debounceEnv(t *testing.T) (env, chan int, chan struct{}) {
	t.Helper()
	e := setup(t, func(c *engine.Config) { c.PollInterval = 50 * time.Millisecond })
	got, hold := make(chan int, 100), make(chan struct{})
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "d", Tasks: []engine.Task{{Name: "a",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			var in struct{ N int }
			if err := h.Input(&in); err != nil {
				return err
			}
			got <- in.N
			select {
			case <-hold:
			case <-ctx.Done():
			}
			return nil
		}}}}))
	return e, got, hold
}

// TestDebounceConcurrent: 100 concurrent enqueues of one key make one
// run, with the input of the last to commit, started once the wait has
// passed after that commit.
func TestDebounceConcurrent(t *testing.T) {
	t.Parallel()
	e, got, hold := debounceEnv(t)
	close(hold)
	ctx := context.Background()
	_, err := e.db.SQL.Exec(`CREATE TABLE public.commits (seq bigserial, n int, at timestamptz, start timestamptz)`)
	require.NoError(t, err)
	start(t, e.eng)
	const wait = time.Second
	var wg sync.WaitGroup
	ids := make([]int64, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := e.db.SQL.BeginTx(ctx, nil)
			require.NoError(t, err)
			defer tx.Rollback()
			run, err := e.eng.EnqueueTx(ctx, tx, "d", map[string]int{"n": i}, engine.WithDebounce("k", wait, time.Minute))
			require.NoError(t, err)
			// Under the key's lock until commit: seq is the commit order.
			_, err = tx.Exec(`INSERT INTO public.commits (n, at, start) SELECT $1, clock_timestamp(), debounce_at FROM cairn.run_rows WHERE id = $2`, i, run.ID)
			require.NoError(t, err)
			require.NoError(t, tx.Commit())
			ids[i] = run.ID
		}()
	}
	wg.Wait()
	for _, id := range ids {
		require.Equal(t, ids[0], id, "one run")
	}
	require.Equal(t, 1, countRuns(t, e))
	// The last two commits: the start the last one set is at least wait
	// after the one before it committed, and at most wait after its own.
	var last int
	var lastAt, prevAt, startAt time.Time
	require.NoError(t, e.db.SQL.QueryRow(`SELECT n, at, start, prev FROM (SELECT *, lag(at) OVER (ORDER BY seq) AS prev FROM public.commits) c
		ORDER BY seq DESC LIMIT 1`).Scan(&last, &lastAt, &startAt, &prevAt))
	require.False(t, startAt.Before(prevAt.Add(wait)) || startAt.After(lastAt.Add(wait)), "start %s: commits at %s, %s", startAt, prevAt, lastAt)
	select {
	case n := <-got:
		require.Equal(t, last, n, "the last input to commit")
	case <-time.After(30 * time.Second):
		t.Fatal("the run did not start")
	}
	run := waitRun(t, e.st, ids[0], 20*time.Second)
	require.NotNil(t, run.StartedAt)
	require.False(t, run.StartedAt.Before(startAt), "started %s, before its start %s", run.StartedAt, startAt)
	var in struct{ N int }
	var raw []byte
	require.NoError(t, e.db.SQL.QueryRow(`SELECT input FROM cairn.runs WHERE id = $1`, ids[0]).Scan(&raw))
	require.NoError(t, json.Unmarshal(raw, &in))
	require.Equal(t, last, in.N)
	pgtest.CheckRelations(t, e.db.SQL, "after a debounce")
}

// TestDebounceMaxWait: under a steady stream of enqueues (every 20 ms for
// 1 s, wait 200 ms) the run starts by its first enqueue + maxWait
// (500 ms), and the enqueues after its start make a new run.
func TestDebounceMaxWait(t *testing.T) {
	t.Parallel()
	e, got, hold := debounceEnv(t)
	close(hold)
	start(t, e.eng)
	ctx := context.Background()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var first int64
	var before, after time.Time // the database clock around the first enqueue
	end := time.Now().Add(time.Second)
	seen := map[int64]bool{}
	for i := 0; time.Now().Before(end); i++ {
		if first == 0 {
			require.NoError(t, e.db.SQL.QueryRow(`SELECT clock_timestamp()`).Scan(&before))
		}
		run, err := e.eng.Enqueue(ctx, "d", map[string]int{"n": i}, engine.WithDebounce("stream", 200*time.Millisecond, 500*time.Millisecond))
		require.NoError(t, err)
		if first == 0 {
			first = run.ID
			require.NoError(t, e.db.SQL.QueryRow(`SELECT clock_timestamp()`).Scan(&after))
		}
		seen[run.ID] = true
		<-tick.C
	}
	// Without the cap each enqueue would push the first run's start on
	// until the stream ends: no enqueue would find it started.
	require.Greater(t, len(seen), 1, "enqueues after the first run started made a new run")
	<-got
	var at, until, started time.Time
	require.NoError(t, e.db.SQL.QueryRow(`SELECT r.debounce_at, r.debounce_until, coalesce(t.first_started_at, t.started_at)
		FROM cairn.run_rows r JOIN cairn.tasks t ON t.run_id = r.id WHERE r.id = $1`, first).Scan(&at, &until, &started))
	require.False(t, until.Before(before.Add(500*time.Millisecond)) || until.After(after.Add(500*time.Millisecond)),
		"cap %s: first enqueue + maxWait (between %s and %s)", until, before, after)
	require.False(t, at.After(until), "start %s past the cap %s", at, until)
	require.False(t, started.Before(at), "started %s before its start %s", started, at)
	require.Less(t, started.Sub(until), time.Second, "started by the cap (and the next poll)")
}

// TestSingleton: a second enqueue while the first run is queued leaves
// one queued run with the newer input; once it started, an enqueue makes
// a new run. The same holds for a debounce key.
func TestSingleton(t *testing.T) {
	t.Parallel()
	e, got, hold := debounceEnv(t)
	ctx := context.Background()
	for _, opt := range []engine.EnqueueOption{engine.WithSingleton("s"), engine.WithDebounce("b", 0, time.Second)} {
		a, err := e.eng.Enqueue(ctx, "d", map[string]int{"n": 1}, opt)
		require.NoError(t, err)
		require.False(t, a.Existing)
		b, err := e.eng.Enqueue(ctx, "d", map[string]int{"n": 2}, opt)
		require.NoError(t, err)
		require.True(t, b.Existing)
		require.Equal(t, a.ID, b.ID)
	}
	require.Equal(t, 2, countRuns(t, e))
	start(t, e.eng)
	require.Equal(t, 2, <-got)
	require.Equal(t, 2, <-got)
	for _, opt := range []engine.EnqueueOption{engine.WithSingleton("s"), engine.WithDebounce("b", 0, time.Second)} {
		c, err := e.eng.Enqueue(ctx, "d", map[string]int{"n": 3}, opt)
		require.NoError(t, err)
		require.False(t, c.Existing, "the started run no longer holds the key")
	}
	require.Equal(t, 3, <-got)
	require.Equal(t, 3, <-got)
	close(hold)
	require.Equal(t, 4, countRuns(t, e))
	pgtest.CheckRelations(t, e.db.SQL, "after singletons")
}
