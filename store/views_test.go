package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestStuckTasksViewShowsExpiredLeasesOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(3))
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 3})
	require.NoError(t, err)
	claim := func(lease time.Duration) store.Claimed {
		got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: lease})
		require.NoError(t, err)
		require.Len(t, got, 1)
		return got[0]
	}
	expired := claim(-time.Minute) // its worker stopped heartbeating a minute ago
	healthy := claim(time.Hour)
	deferredExpired := claim(-time.Second)
	moved, err := b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: deferredExpired.ID, To: store.StatusDeferred}}})
	require.NoError(t, err)
	require.Len(t, moved, 1)

	rows, err := b.db.SQL.QueryContext(ctx, `SELECT task_id, status, worker_id, overdue > interval '0' FROM `+pgtest.Schema+`.cairn_stuck_tasks ORDER BY task_id`)
	require.NoError(t, err)
	defer rows.Close()
	stuck := map[int64]string{}
	for rows.Next() {
		var id, worker int64
		var status string
		var overdue bool
		require.NoError(t, rows.Scan(&id, &status, &worker, &overdue))
		require.Equal(t, w, worker)
		require.True(t, overdue)
		stuck[id] = status
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[int64]string{expired.ID: store.StatusRunning, deferredExpired.ID: store.StatusDeferred}, stuck,
		"task %d holds a live lease and is not stuck", healthy.ID)
}
