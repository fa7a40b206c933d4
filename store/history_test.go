package store_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

const day = 24 * time.Hour

// dbNow is the database's clock.
func (b bundle) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, b.db.SQL.QueryRow(`SELECT now()`).Scan(&now))
	return now
}

// partitionOf returns the partition holding the event with id.
func (b bundle) partitionOf(t *testing.T, id int64) string {
	t.Helper()
	var name string
	require.NoError(t, b.db.SQL.QueryRow(`SELECT tableoid::regclass::text FROM cairn.task_events WHERE id = $1`, id).Scan(&name))
	return name
}

// addEvent writes an event of task at time at and returns its id.
func (b bundle) addEvent(t *testing.T, runID, taskID int64, at time.Time) int64 {
	t.Helper()
	var id int64
	require.NoError(t, b.db.SQL.QueryRow(`INSERT INTO cairn.task_events (run_id, task_id, from_status, to_status, at, detail)
		VALUES ($1, $2, 'ready', 'running', $3, '{"n": 1}') RETURNING id`, runID, taskID, at).Scan(&id))
	return id
}

// Partitions are created for the days asked, once, whoever asks at the
// same time; rows the DEFAULT partition holds for a new day move into it.
func TestHistoryPartitionEnsure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	now := b.dbNow(t)
	parts, err := b.st.HistoryPartitionList(ctx)
	require.NoError(t, err)
	require.True(t, parts[len(parts)-1].Default, "the DEFAULT partition is listed last")
	require.Equal(t, "task_events_default", parts[len(parts)-1].Name)

	// Today and the next three days exist since the migration.
	created, err := b.st.HistoryPartitionEnsure(ctx, now, 4)
	require.NoError(t, err)
	require.Empty(t, created)

	// An event ten days ahead has no partition yet: the DEFAULT one takes it.
	ahead := now.Add(10 * day).UTC().Truncate(day)
	runs, err := b.st.RunInsertMany(ctx, single(1))
	require.NoError(t, err)
	id := b.addEvent(t, runs[0].ID, 1, ahead.Add(time.Hour))
	require.Equal(t, "cairn.task_events_default", b.partitionOf(t, id))

	created, err = b.st.HistoryPartitionEnsure(ctx, ahead, 2)
	require.NoError(t, err)
	require.Equal(t, []string{store.HistoryDayName(ahead), store.HistoryDayName(ahead.Add(day))}, created)
	require.Equal(t, "cairn."+store.HistoryDayName(ahead), b.partitionOf(t, id), "moved out of DEFAULT")
	var detail string
	require.NoError(t, b.db.SQL.QueryRow(`SELECT detail::text FROM cairn.task_events WHERE id = $1`, id).Scan(&detail))
	require.Equal(t, `{"n": 1}`, detail)

	parts, err = b.st.HistoryPartitionList(ctx)
	require.NoError(t, err)
	var p store.HistoryPartition
	for _, q := range parts {
		if q.Name == store.HistoryDayName(ahead) {
			p = q
		}
	}
	require.NotNil(t, p.From)
	require.NotNil(t, p.To)
	require.True(t, p.From.Equal(ahead), "from %s", p.From)
	require.True(t, p.To.Equal(ahead.Add(day)), "to %s", p.To)
	var indexes int
	require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM pg_indexes WHERE schemaname = 'cairn' AND tablename = $1`, p.Name).Scan(&indexes))
	require.Equal(t, 2, indexes, "by task and BRIN on at")

	// Four engines at once over the same days: each day made once.
	from := now.Add(20 * day)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var all []string
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := b.st.HistoryPartitionEnsure(ctx, from, 3)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			all = append(all, got...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Strings(all)
	want := []string{store.HistoryDayName(from), store.HistoryDayName(from.Add(day)), store.HistoryDayName(from.Add(2 * day))}
	require.Equal(t, want, all)
}

// historyFixture makes partitions for two days forty days ago and four
// runs whose events are in them: a live run, one finished long ago (the
// pruner's), one that finished yesterday and one finished long ago whose
// uniqueness window still holds. It returns the runs' task ids by name
// and the event ids of each.
func historyFixture(t *testing.T, b bundle) (old time.Time, tasks map[string]int64, events map[string][]int64) {
	t.Helper()
	ctx := context.Background()
	now := b.dbNow(t)
	old = now.Add(-40 * day).UTC().Truncate(day)
	created, err := b.st.HistoryPartitionEnsure(ctx, old, 2)
	require.NoError(t, err)
	require.Len(t, created, 2)
	runs, err := b.st.RunInsertMany(ctx, single(4))
	require.NoError(t, err)
	names := []string{"live", "pruned", "recent", "unique"}
	tasks, events = map[string]int64{}, map[string][]int64{}
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := b.db.SQL.Exec(q, args...)
		require.NoError(t, err)
	}
	exec(`UPDATE cairn.run_rows SET created_at = $1 WHERE id = ANY($2)`, old.Add(time.Hour), fmt.Sprintf("{%d,%d,%d,%d}", runs[0].ID, runs[1].ID, runs[2].ID, runs[3].ID))
	exec(`UPDATE cairn.run_rows SET status = 'completed', finished_at = $2 WHERE id = $1`, runs[1].ID, old.Add(2*time.Hour))
	exec(`UPDATE cairn.run_rows SET status = 'completed', finished_at = now() - interval '1 day' WHERE id = $1`, runs[2].ID)
	exec(`UPDATE cairn.run_rows SET status = 'completed', finished_at = $2, unique_until = now() + interval '1 day' WHERE id = $1`, runs[3].ID, old.Add(2*time.Hour))
	for i, name := range names {
		ts, err := b.st.TaskListByRun(ctx, runs[i].ID)
		require.NoError(t, err)
		tasks[name] = ts[0].ID
		for _, at := range []time.Time{old.Add(time.Hour), old.Add(day + time.Hour), now} {
			events[name] = append(events[name], b.addEvent(t, runs[i].ID, ts[0].ID, at))
		}
	}
	require.Equal(t, "cairn."+store.HistoryDayName(old), b.partitionOf(t, events["live"][0]))
	return old, tasks, events
}

// Partitions past the retention are dropped, and the events of runs the
// pruner keeps survive them (in the DEFAULT partition); the pruned run's
// events in them are gone.
func TestHistoryPartitionDropKeepsEventsOfKeptRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old, _, events := historyFixture(t, b)

	dropped, err := b.st.HistoryPartitionDrop(ctx, 30*day)
	require.NoError(t, err)
	require.Len(t, dropped, 2)
	require.Equal(t, store.HistoryDayName(old), dropped[0].Name)
	require.Equal(t, int64(3), dropped[0].Kept, "live, recent and unique runs")
	require.Equal(t, store.HistoryDayName(old.Add(day)), dropped[1].Name)
	require.Equal(t, int64(3), dropped[1].Kept)
	parts, err := b.st.HistoryPartitionList(ctx)
	require.NoError(t, err)
	for _, p := range parts {
		require.NotEqual(t, store.HistoryDayName(old), p.Name)
	}

	for _, name := range []string{"live", "recent", "unique"} {
		for i, id := range events[name] {
			want := "cairn.task_events_default"
			if i == 2 {
				want = "cairn." + store.HistoryDayName(b.dbNow(t))
			}
			require.Equal(t, want, b.partitionOf(t, id), "%s event %d", name, i)
		}
	}
	var left int
	require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM cairn.task_events WHERE id = ANY($1)`,
		fmt.Sprintf("{%d,%d,%d}", events["pruned"][0], events["pruned"][1], events["pruned"][2])).Scan(&left))
	require.Equal(t, 1, left, "only the pruned run's event of today is left (the pruner's)")
	var detail string
	require.NoError(t, b.db.SQL.QueryRow(`SELECT detail::text FROM cairn.task_events WHERE id = $1`, events["live"][0]).Scan(&detail))
	require.Equal(t, `{"n": 1}`, detail, "copied back whole")

	// The pruner deletes the old run; its event stamped today is left to
	// today's partition's drop (see TestRunPruneLeavesOldPartitionsToTheDrop).
	n, err := b.st.RunPrune(ctx, 30*day, 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM cairn.runs WHERE id = (SELECT run_id FROM cairn.task_events WHERE id = $1)`,
		events["pruned"][2]).Scan(&left))
	require.Zero(t, left, "run pruned")

	again, err := b.st.HistoryPartitionDrop(ctx, 30*day)
	require.NoError(t, err)
	require.Empty(t, again)
}

// A drop that fails half-way (here: no DEFAULT partition to take the
// kept events back) changes nothing: the partition stays attached with
// every row.
func TestHistoryPartitionDropFailureChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old, _, events := historyFixture(t, b)
	_, err := b.db.SQL.Exec(`ALTER TABLE cairn.task_events DETACH PARTITION cairn.task_events_default`)
	require.NoError(t, err)

	_, err = b.st.HistoryPartitionDrop(ctx, 30*day)
	require.ErrorContains(t, err, "keep events of live runs")
	parts, err := b.st.HistoryPartitionList(ctx)
	require.NoError(t, err)
	require.Equal(t, store.HistoryDayName(old), parts[0].Name, "still attached")
	for name, ids := range events {
		for _, id := range ids[:1] {
			require.Equal(t, "cairn."+store.HistoryDayName(old), b.partitionOf(t, id), name)
		}
	}
	var n int
	require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM cairn.task_events`).Scan(&n))
	require.Equal(t, 12, n)
}

// Without a partitioned task_events, ensuring partitions says the schema
// is not migrated.
func TestHistoryPartitionEnsureNeedsMigration(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	_, err := db.SQL.Exec(`CREATE SCHEMA cairn; CREATE TABLE cairn.task_events (at timestamptz)`)
	require.NoError(t, err)
	st, err := store.New(db.SQL, "cairn")
	require.NoError(t, err)
	_, err = st.HistoryPartitionEnsure(context.Background(), time.Now(), 1)
	require.ErrorIs(t, err, store.ErrNotMigrated)
}

// The pruner deletes a pruned run's events since the cutoff and those in
// the DEFAULT partition, and leaves the older ones in daily partitions to
// the partition drop, which takes them without a row delete.
func TestRunPruneLeavesOldPartitionsToTheDrop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old, tasks, events := historyFixture(t, b)
	var runID int64
	require.NoError(t, b.db.SQL.QueryRow(`SELECT run_id FROM cairn.tasks WHERE id = $1`, tasks["pruned"]).Scan(&runID))
	inDefault := b.addEvent(t, runID, tasks["pruned"], old.Add(-5*day))
	require.Equal(t, "cairn.task_events_default", b.partitionOf(t, inDefault))
	exists := func(id int64) bool {
		var n int
		require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM cairn.task_events WHERE id = $1`, id).Scan(&n))
		return n == 1
	}

	// An event stamped within the hour after the cutoff (a transaction
	// that began before the run finished can stamp one a little later
	// than an earlier one's finish).
	afterCutoff := b.addEvent(t, runID, tasks["pruned"], b.dbNow(t).Add(-30*day+10*time.Minute))

	n, err := b.st.RunPrune(ctx, 30*day, 100)
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.False(t, exists(inDefault), "DEFAULT partition: deleted by the pruner")
	require.False(t, exists(afterCutoff), "since the cutoff: deleted by the pruner")
	require.True(t, exists(events["pruned"][0]), "in a partition past the cutoff: left to the drop")
	require.True(t, exists(events["pruned"][1]))
	// One stamped today, which the engine never writes for a run finished
	// forty days ago: the pruner does not look in the partitions written
	// to now (they have no B-tree by task), so it waits for its
	// partition's drop.
	require.True(t, exists(events["pruned"][2]), "today: left to the drop")

	_, err = b.st.HistoryPartitionDrop(ctx, 30*day)
	require.NoError(t, err)
	require.False(t, exists(events["pruned"][0]))
	require.False(t, exists(events["pruned"][1]))
	for _, name := range []string{"live", "recent", "unique"} {
		for _, id := range events[name] {
			require.True(t, exists(id), name)
		}
	}
}

// In a caller's transaction, several partitions are dropped in turn
// (each kept-events scratch table is gone before the next).
func TestHistoryPartitionDropInCallersTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	old, _, events := historyFixture(t, b)
	tx, err := b.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck
	dropped, err := b.st.WithTx(tx).HistoryPartitionDrop(ctx, 30*day)
	require.NoError(t, err)
	require.Len(t, dropped, 2)
	require.Equal(t, store.HistoryDayName(old), dropped[0].Name)
	// Read in the transaction: the detach locks task_events until the commit.
	var where string
	require.NoError(t, tx.QueryRow(`SELECT tableoid::regclass::text FROM cairn.task_events WHERE id = $1`, events["live"][0]).Scan(&where))
	require.Equal(t, "cairn.task_events_default", where)
	require.NoError(t, tx.Commit())
	require.Equal(t, "cairn.task_events_default", b.partitionOf(t, events["live"][1]))
}
