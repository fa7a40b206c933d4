package store_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// move moves tasks from one state to another as an admin would (no worker).
func move(t *testing.T, st *store.Store, from, to string, ids ...int64) {
	t.Helper()
	items := make([]store.TransitionItem, len(ids))
	for i, id := range ids {
		items[i] = store.TransitionItem{TaskID: id, To: to}
	}
	moved, _, err := st.TransitionAll(context.Background(), store.TransitionParams{From: []string{from}, Items: items})
	require.NoError(t, err)
	require.Len(t, moved, len(ids))
}

// diamondTasks returns the tasks of a diamond run by name.
func diamondTasks(t *testing.T, st *store.Store, runID int64) map[string]store.Task {
	t.Helper()
	ts, err := st.TaskListByRun(context.Background(), runID)
	require.NoError(t, err)
	out := map[string]store.Task{}
	for _, x := range ts {
		out[x.Name] = x
	}
	return out
}

// retryFixture inserts three diamond runs: the first ends failed in b (a
// and c completed, d skipped), the second failed in a (b, c and d
// skipped), the third completed.
func retryFixture(t *testing.T, st *store.Store) (bFailed, aFailed, ok int64) {
	t.Helper()
	ctx := context.Background()
	res, err := st.RunInsertMany(ctx, []store.RunInsertParams{diamond(), diamond(), diamond()})
	require.NoError(t, err)
	bFailed, aFailed, ok = res[0].ID, res[1].ID, res[2].ID

	r1 := diamondTasks(t, st, bFailed)
	move(t, st, store.StatusReady, store.StatusCompleted, r1["a"].ID)
	move(t, st, store.StatusReady, store.StatusFailed, r1["b"].ID)
	move(t, st, store.StatusReady, store.StatusCompleted, r1["c"].ID)
	move(t, st, store.StatusReady, store.StatusFailed, diamondTasks(t, st, aFailed)["a"].ID)
	r3 := diamondTasks(t, st, ok)
	move(t, st, store.StatusReady, store.StatusCompleted, r3["a"].ID)
	move(t, st, store.StatusReady, store.StatusCompleted, r3["b"].ID, r3["c"].ID)
	move(t, st, store.StatusReady, store.StatusCompleted, r3["d"].ID)

	for id, want := range map[int64]string{bFailed: store.RunFailed, aFailed: store.RunFailed, ok: store.RunCompleted} {
		r, err := st.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, r.Status, "run %d", id)
	}
	require.Equal(t, store.StatusSkipped, diamondTasks(t, st, bFailed)["d"].Status)
	require.Equal(t, store.StatusSkipped, diamondTasks(t, st, aFailed)["d"].Status)
	return bFailed, aFailed, ok
}

func TestRunRetryResetsFailedAndSkippedTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	bFailed, aFailed, ok := retryFixture(t, b.st)

	moved, runs, err := b.st.RunRetry(ctx, &store.RunRetryParams{RunIDs: []int64{bFailed, aFailed, ok, 999999}})
	require.NoError(t, err)
	require.Equal(t, []int64{bFailed, aFailed}, runs, "the completed and the unknown run are left alone")
	require.Len(t, moved, 6, "b of the first; a, b, c and d of the second (d of the first too)")

	type state struct {
		status  string
		pending int
	}
	got := func(runID int64) map[string]state {
		out := map[string]state{}
		for n, x := range diamondTasks(t, b.st, runID) {
			out[n] = state{x.Status, x.PendingDeps}
		}
		return out
	}
	require.Equal(t, map[string]state{
		"a": {store.StatusCompleted, 0}, "b": {store.StatusReady, 0}, "c": {store.StatusCompleted, 0}, "d": {store.StatusNotStarted, 1},
	}, got(bFailed))
	require.Equal(t, map[string]state{
		"a": {store.StatusReady, 0}, "b": {store.StatusNotStarted, 1}, "c": {store.StatusNotStarted, 1}, "d": {store.StatusNotStarted, 2},
	}, got(aFailed))
	for _, id := range []int64{bFailed, aFailed} {
		r, err := b.st.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.RunRunning, r.Status, "run %d runs again", id)
		require.Nil(t, r.FinishedAt)
	}
	evs, err := b.st.EventListByRun(ctx, aFailed)
	require.NoError(t, err)
	resets := 0
	for _, ev := range evs {
		if ev.From != nil && *ev.From == store.StatusSkipped && ev.To == store.StatusNotStarted {
			resets++
		}
	}
	require.Equal(t, 3, resets, "one event per reset task")

	// The DAG reruns from the retried task: a completes, b and c are ready.
	move(t, b.st, store.StatusReady, store.StatusCompleted, diamondTasks(t, b.st, aFailed)["a"].ID)
	s := got(aFailed)
	require.Equal(t, store.StatusReady, s["b"].status)
	require.Equal(t, store.StatusReady, s["c"].status)
}

// A batch is one transaction: when its last statement fails, the moves
// made before it in the batch are rolled back too.
func TestRunRetryAndDeleteAreAllOrNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	bFailed, aFailed, ok := retryFixture(t, b.st)

	// The reset of skipped tasks (after the failed ones moved to ready)
	// fails on one run's tasks.
	_, err := b.db.SQL.ExecContext(ctx, `
CREATE FUNCTION `+pgtest.Schema+`.boom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF NEW.to_status = 'not_started' AND NEW.run_id = `+strconv.FormatInt(aFailed, 10)+` THEN RAISE EXCEPTION 'boom'; END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER boom BEFORE INSERT ON `+pgtest.Schema+`.task_events FOR EACH ROW EXECUTE FUNCTION `+pgtest.Schema+`.boom();
CREATE FUNCTION `+pgtest.Schema+`.boom_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF OLD.id = `+strconv.FormatInt(aFailed, 10)+` THEN RAISE EXCEPTION 'boom'; END IF;
	RETURN OLD;
END $$;
CREATE TRIGGER boom_delete BEFORE DELETE ON `+pgtest.Schema+`.run_rows FOR EACH ROW EXECUTE FUNCTION `+pgtest.Schema+`.boom_delete();`)
	require.NoError(t, err)

	_, _, err = b.st.RunRetry(ctx, &store.RunRetryParams{RunIDs: []int64{bFailed, aFailed}})
	require.ErrorContains(t, err, "boom")
	require.Equal(t, store.StatusFailed, diamondTasks(t, b.st, bFailed)["b"].Status, "the other run's move to ready is rolled back")
	require.Equal(t, store.StatusFailed, diamondTasks(t, b.st, aFailed)["a"].Status)
	for _, id := range []int64{bFailed, aFailed} {
		r, err := b.st.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.RunFailed, r.Status)
	}

	_, err = b.st.RunDeleteFinished(ctx, []int64{bFailed, aFailed, ok})
	require.ErrorContains(t, err, "boom")
	for _, id := range []int64{bFailed, aFailed, ok} {
		_, err := b.st.RunGet(ctx, id)
		require.NoError(t, err, "run %d is still there", id)
		require.Len(t, diamondTasks(t, b.st, id), 4)
	}
}

func TestRunDeleteFinishedOnlyFinished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	bFailed, _, ok := retryFixture(t, b.st)
	live, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{diamond()})
	require.NoError(t, err)

	okTasks, err := b.st.TaskListByRun(ctx, ok)
	require.NoError(t, err)
	require.NoError(t, b.st.TaskLogAppend(ctx, []store.TaskLogLine{{TaskID: okTasks[0].ID, RunID: ok, Attempt: 1,
		At: time.Now(), Level: "INFO", Msg: "a line"}}))

	deleted, err := b.st.RunDeleteFinished(ctx, []int64{bFailed, ok, live[0].ID, 999999})
	require.NoError(t, err)
	require.Equal(t, []int64{bFailed, ok}, deleted)
	for _, id := range []int64{bFailed, ok} {
		_, err := b.st.RunGet(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
		evs, err := b.st.EventListByRun(ctx, id)
		require.NoError(t, err)
		require.Empty(t, evs, "its events go with it")
	}
	lines, _, err := b.st.TaskLogRecent(ctx, okTasks[0].ID, 10)
	require.NoError(t, err)
	require.Empty(t, lines, "its tasks' log lines go with it")
	_, err = b.st.RunGet(ctx, live[0].ID)
	require.NoError(t, err, "an unfinished run stays")
}
