package store_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// keyed returns one single-task run with key, held for window (0: none).
func keyed(key string, window time.Duration) store.RunInsertParams {
	p := single(1)[0]
	p.Key = &key
	p.UniqueFor = window
	return p
}

func insertOne(t *testing.T, st *store.Store, p store.RunInsertParams) store.RunInserted {
	t.Helper()
	res, err := st.RunInsertMany(context.Background(), []store.RunInsertParams{p})
	require.NoError(t, err)
	require.Len(t, res, 1)
	return res[0]
}

// finishRun claims the one ready task of the store and moves it to.
func finishRun(t *testing.T, st *store.Store, runID int64, to string) {
	t.Helper()
	w, err := st.WorkerInsert(context.Background(), "w", map[string]int{"default": 1})
	require.NoError(t, err)
	got := claimAll(t, st, w, 1)
	require.Len(t, got, 1)
	require.Equal(t, runID, got[0].RunID)
	complete(t, st, w, to, got[0])
	r, err := st.RunGet(context.Background(), runID)
	require.NoError(t, err)
	require.True(t, store.RunIsFinished(r.Status), r.Status)
}

// expire moves the window of run id into the past, as if d had passed.
func expire(t *testing.T, db *sql.DB, id int64) {
	t.Helper()
	res, err := db.Exec(`UPDATE cairn.run_rows SET unique_until = now() - interval '1 second' WHERE id = $1 AND unique_until IS NOT NULL`, id)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "run %d has a window", id)
}

// A run inserted with UniqueFor keeps its key after it completed or
// failed, for inserts with and without a window; a run without one frees
// its key when it finishes.
func TestUniqueForHoldsAfterFinish(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, to := range []string{store.StatusCompleted, store.StatusFailed} {
		key := "k-" + to
		first := insertOne(t, b.st, keyed(key, time.Hour))
		require.False(t, first.Existing)
		finishRun(t, b.st, first.ID, to)
		for _, window := range []time.Duration{time.Hour, time.Minute, 0} {
			again := insertOne(t, b.st, keyed(key, window))
			require.True(t, again.Existing, "%s, window %s", to, window)
			require.Equal(t, first.ID, again.ID, "%s, window %s", to, window)
		}
		r, err := b.st.RunGet(context.Background(), first.ID)
		require.NoError(t, err)
		require.NotNil(t, r.UniqueUntil)
		require.WithinDuration(t, r.CreatedAt.Add(time.Hour), *r.UniqueUntil, time.Millisecond, "the window runs from creation")
	}

	plain := insertOne(t, b.st, keyed("plain", 0))
	finishRun(t, b.st, plain.ID, store.StatusCompleted)
	next := insertOne(t, b.st, keyed("plain", 0))
	require.False(t, next.Existing, "without a window a finished run frees its key")
	require.NotEqual(t, plain.ID, next.ID)
}

// When the window has passed, the next insert of the key frees it and
// makes a new run that holds the key for its own window; a run still
// live past its window keeps the key until it finishes.
func TestUniqueForExpires(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	first := insertOne(t, b.st, keyed("k", time.Hour))
	expire(t, b.db.SQL, first.ID)
	live := insertOne(t, b.st, keyed("k", time.Hour))
	require.True(t, live.Existing, "a live run holds its key past its window")
	require.Equal(t, first.ID, live.ID)

	finishRun(t, b.st, first.ID, store.StatusCompleted)
	second := insertOne(t, b.st, keyed("k", time.Hour))
	require.False(t, second.Existing, "the window has passed and the run finished")
	require.NotEqual(t, first.ID, second.ID)
	old, err := b.st.RunGet(ctx, first.ID)
	require.NoError(t, err)
	require.Nil(t, old.UniqueUntil, "the old run's window is released")
	require.Nil(t, old.LiveKey)

	again := insertOne(t, b.st, keyed("k", 0))
	require.True(t, again.Existing, "the new run holds the key")
	require.Equal(t, second.ID, again.ID)
}

// Duplicates inside one batch settle on one run, windows or not, and a
// finished run in its window holds its key for the whole batch.
func TestUniqueForBatchDuplicates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	done := insertOne(t, b.st, keyed("done", time.Hour))
	finishRun(t, b.st, done.ID, store.StatusCompleted)
	res, err := b.st.RunInsertMany(context.Background(), []store.RunInsertParams{
		keyed("a", time.Hour), keyed("a", time.Hour), keyed("b", time.Hour), keyed("a", 0), keyed("b", time.Minute),
		keyed("done", time.Hour), keyed("done", 0),
	})
	require.NoError(t, err)
	require.False(t, res[0].Existing)
	require.False(t, res[2].Existing)
	for _, i := range []int{1, 3} {
		require.True(t, res[i].Existing, "run %d", i)
		require.Equal(t, res[0].ID, res[i].ID, "run %d", i)
	}
	require.True(t, res[4].Existing)
	require.Equal(t, res[2].ID, res[4].ID)
	for _, i := range []int{5, 6} {
		require.True(t, res[i].Existing, "run %d", i)
		require.Equal(t, done.ID, res[i].ID, "run %d", i)
	}
	var n int
	require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM cairn.runs`).Scan(&n))
	require.Equal(t, 3, n)
}

// An insert that meets the key in a run it cannot see yet (committed
// after its snapshot) waits for that run's transaction and returns it,
// even when that run has already finished: the window and the live rule
// are one index entry, so no finish can slip between them.
func TestUniqueForWaitsForUncommittedHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	tx, err := b.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck
	held, err := b.st.WithTx(tx).RunInsertMany(ctx, []store.RunInsertParams{keyed("k", time.Hour)})
	require.NoError(t, err)
	// The holder finishes before it commits.
	_, err = tx.Exec(`UPDATE cairn.run_rows SET status = 'completed', finished_at = now() WHERE id = $1`, held[0].ID)
	require.NoError(t, err)

	type result struct {
		r   store.RunInserted
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{keyed("k", time.Hour)})
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{r: res[0]}
	}()
	// Wait until the second insert waits on the first's transaction.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting int
		require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted`).Scan(&waiting))
		if waiting > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("the insert did not wait for the holder: %+v", r)
		default:
		}
		require.True(t, time.Now().Before(deadline), "the insert never waited for the holder")
		time.Sleep(5 * time.Millisecond) // poll interval of the condition above
	}
	require.NoError(t, tx.Commit())
	r := <-done
	require.NoError(t, r.err)
	require.True(t, r.r.Existing)
	require.Equal(t, held[0].ID, r.r.ID)
}

// The pruner keeps a finished run while its window holds, so the key
// keeps returning it; once the window has passed the run is pruned and
// the key makes a fresh run.
func TestUniqueForSurvivesPruning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	first := insertOne(t, b.st, keyed("k", time.Hour))
	finishRun(t, b.st, first.ID, store.StatusCompleted)
	n, err := b.st.RunPrune(ctx, -time.Minute, 100) // every finished run is old enough
	require.NoError(t, err)
	require.Zero(t, n, "a run in its window is kept")
	again := insertOne(t, b.st, keyed("k", time.Hour))
	require.True(t, again.Existing)
	require.Equal(t, first.ID, again.ID)

	expire(t, b.db.SQL, first.ID)
	n, err = b.st.RunPrune(ctx, -time.Minute, 100)
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "past its window it is pruned")
	_, err = b.st.RunGet(ctx, first.ID)
	require.ErrorIs(t, err, store.ErrNotFound)
	fresh := insertOne(t, b.st, keyed("k", time.Hour))
	require.False(t, fresh.Existing, "a pruned run frees its key")
	r, err := b.st.RunGet(ctx, fresh.ID)
	require.NoError(t, err, "the key returns a run that exists")
	require.Equal(t, "k", *r.IdempotencyKey)
}

func TestUniqueForRefusesBadWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	noKey := single(1)[0]
	noKey.UniqueFor = time.Hour
	for name, p := range map[string]store.RunInsertParams{"negative": keyed("k", -time.Second), "no key": noKey} {
		_, err := b.st.RunInsertMany(context.Background(), []store.RunInsertParams{p})
		require.ErrorIs(t, err, store.ErrInvalidValue, name)
		require.ErrorContains(t, err, "unique_for", name)
	}
	var n int
	require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM cairn.runs`).Scan(&n))
	require.Zero(t, n)
}
