package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// A parked keyed task that finds its key full as it comes back keeps its
// place against new claims: the key's next free place is its, not a new
// task's (before, a new claim could take it every time, and the
// returning task starve). A stamp no longer renewed stops counting.
func TestReturningKeyedTaskGoesBeforeNewClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 1}
	claim := func() []store.Claimed {
		c, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{10},
			Lease: time.Hour, Keyed: true})
		require.NoError(t, err)
		return c
	}
	move := func(c store.Claimed, from, to string) {
		moved, err := b.st.Transition(ctx, store.TransitionParams{From: []string{from}, WorkerID: w,
			Items: []store.TransitionItem{{TaskID: c.ID, From: from, To: to, Attempt: c.Attempt}}})
		require.NoError(t, err)
		require.Len(t, moved, 1)
	}
	resume := func(c store.Claimed) (moved, full bool) {
		moved, full, err := b.st.TaskResumeKeyed(ctx, w, store.ResumeTask{ID: c.ID, Attempt: c.Attempt}, time.Hour)
		require.NoError(t, err)
		return moved, full
	}
	why := func(id int64) string {
		wt, err := b.st.TaskWaitGet(ctx, id)
		require.NoError(t, err)
		require.NotNil(t, wt)
		return wt.Detail
	}

	// A runs and parks, giving its place back; B takes it.
	ids := insertRuns(t, b, keyedTask("w", "default", `{"t": "k"}`, conc, nil))
	a := claim()
	require.Len(t, a, 1)
	move(a[0], store.StatusRunning, store.StatusDeferred)
	insertRuns(t, b, keyedTask("w", "default", `{"t": "k"}`, conc, nil))
	bTask := claim()
	require.Len(t, bTask, 1)

	// A may run on, but the key is full: it says it waits.
	moved, full := resume(a[0])
	require.False(t, moved)
	require.True(t, full)

	// B finishes and C arrives: C is not claimed, A's place is kept.
	move(bTask[0], store.StatusRunning, store.StatusCompleted)
	cIDs := insertRuns(t, b, keyedTask("w", "default", `{"t": "k"}`, conc, nil))
	require.Empty(t, claim(), "a new task took the place a returning task waits for")
	require.Contains(t, why(cIDs[0]), "kept for parked tasks coming back")

	moved, _ = resume(a[0])
	require.True(t, moved, "the returning task takes its place")
	var stamped int
	require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM cairn.tasks WHERE resume_wanted_at IS NOT NULL`).Scan(&stamped))
	require.Zero(t, stamped, "a resume clears the stamp")
	move(a[0], store.StatusRunning, store.StatusCompleted)
	c := claim()
	require.Len(t, c, 1)
	require.Equal(t, cIDs[0], c[0].ID)
	require.NotEqual(t, ids[0], c[0].ID)

	// A stamp no longer renewed (its task cancelled, its worker gone)
	// stops keeping a place after 5 s.
	insertRuns(t, b, keyedTask("w", "default", `{"t": "k"}`, conc, nil))
	move(c[0], store.StatusRunning, store.StatusDeferred)
	d := claim()
	require.Len(t, d, 1)
	moved, full = resume(c[0])
	require.False(t, moved)
	require.True(t, full)
	move(d[0], store.StatusRunning, store.StatusCompleted)
	insertRuns(t, b, keyedTask("w", "default", `{"t": "k"}`, conc, nil))
	require.Empty(t, claim())
	_, err = b.db.SQL.Exec(`UPDATE cairn.tasks SET resume_wanted_at = now() - interval '6 seconds' WHERE id = $1`, c[0].ID)
	require.NoError(t, err)
	require.Len(t, claim(), 1, "a stale stamp keeps no place")
}
