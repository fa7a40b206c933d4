package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// requireCountsExact compares cairn_task_counts (counters plus unfolded
// deltas) with a count of the tasks table.
func requireCountsExact(t *testing.T, b bundle) {
	t.Helper()
	ctx := context.Background()
	got, err := b.st.TaskCountsByState(ctx)
	require.NoError(t, err)
	rows, err := b.db.SQL.QueryContext(ctx, `SELECT workflow, queue, status, count(*) FROM `+pgtest.Schema+`.tasks GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`)
	require.NoError(t, err)
	defer rows.Close()
	var want []store.TaskCount
	for rows.Next() {
		var c store.TaskCount
		require.NoError(t, rows.Scan(&c.Workflow, &c.Queue, &c.Status, &c.Tasks))
		want = append(want, c)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, want, got)
}

// requireNoDeltas checks that every delta was folded (or dropped).
func requireNoDeltas(t *testing.T, b bundle) {
	t.Helper()
	var deltas int
	require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM `+pgtest.Schema+`.task_count_deltas`).Scan(&deltas))
	require.Zero(t, deltas)
}

// The task counts kept by the tasks triggers stay exact through enqueue,
// claims, transitions that release dependents in the same statement,
// reopening, pruning and folding.
func TestTaskCountsStayExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, append(single(5), diamond(), diamond()))
	require.NoError(t, err)
	requireCountsExact(t, b)

	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 100})
	require.NoError(t, err)
	got := claimAll(t, b.st, w, 100) // 5 single tasks and 2 diamond roots
	require.Len(t, got, 7)
	requireCountsExact(t, b)
	complete(t, b.st, w, store.StatusCompleted, got[:6]...)
	complete(t, b.st, w, store.StatusFailed, got[6])
	requireCountsExact(t, b)

	n, err := b.st.TaskCountsFold(ctx)
	require.NoError(t, err)
	require.Positive(t, n)
	requireCountsExact(t, b)

	var failedID int64
	require.NoError(t, b.db.SQL.QueryRowContext(ctx, `SELECT id FROM `+pgtest.Schema+`.tasks WHERE status = 'failed'`).Scan(&failedID))
	moved, err := b.st.TaskReopen(ctx, &store.TaskReopenParams{TaskID: failedID, From: []string{store.StatusFailed}})
	require.NoError(t, err)
	require.NotEmpty(t, moved)
	requireCountsExact(t, b)

	pruned, err := b.st.RunPrune(ctx, -time.Minute, 100)
	require.NoError(t, err)
	require.Positive(t, pruned)
	requireCountsExact(t, b)
	_, err = b.st.TaskCountsFold(ctx)
	require.NoError(t, err)
	requireCountsExact(t, b)
	requireNoDeltas(t, b)
}

// Tasks written with triggers off (as logical replication does) leave the
// counts wrong until TaskCountsRecount rebuilds them.
func TestTaskCountsRecount(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(3))
	require.NoError(t, err)
	conn, err := b.db.SQL.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `UPDATE `+pgtest.Schema+`.tasks SET status = 'cancelled'`)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `RESET session_replication_role`)
	require.NoError(t, err)
	counts, err := b.st.TaskCountsByState(ctx)
	require.NoError(t, err)
	require.Equal(t, store.StatusReady, counts[0].Status, "the triggers did not see the update")

	require.NoError(t, b.st.TaskCountsRecount(ctx))
	requireCountsExact(t, b)
	requireNoDeltas(t, b)
}

// An enqueue lists each run's tasks on its row in idx order (see
// migration 022), and deleting runs deletes their tasks.
func TestRunListsItsTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	runs, err := b.st.RunInsertMany(ctx, append(single(2), diamond()))
	require.NoError(t, err)
	for _, r := range runs {
		var listed, byIdx pq.Int64Array
		require.NoError(t, b.db.SQL.QueryRowContext(ctx, `SELECT r.task_ids, ARRAY(SELECT t.id FROM `+pgtest.Schema+`.tasks t WHERE t.run_id = r.id ORDER BY t.idx)
			FROM `+pgtest.Schema+`.runs r WHERE r.id = $1`, r.ID).Scan(&listed, &byIdx))
		require.NotEmpty(t, listed)
		require.Equal(t, byIdx, listed)
		require.IsIncreasing(t, []int64(listed), "ids are drawn in idx order, the order row locks are taken in")
	}
	_, err = b.db.SQL.ExecContext(ctx, `DELETE FROM `+pgtest.Schema+`.run_rows WHERE id = $1`, runs[2].ID)
	require.NoError(t, err)
	var left int
	require.NoError(t, b.db.SQL.QueryRowContext(ctx, `SELECT count(*) FROM `+pgtest.Schema+`.tasks WHERE run_id = $1`, runs[2].ID).Scan(&left))
	require.Zero(t, left)
	requireCountsExact(t, b)
}
