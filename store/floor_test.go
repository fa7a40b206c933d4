package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// A claim starts at its queue's floor: it takes no ready task below it
// (a lower priority number is never below it), TaskClaimFloor finds the
// lowest claimable task wherever the floor is, and the floor is where the
// index scan starts (a row comparison in the claim index's condition),
// which is what keeps the claim off the entries of earlier tasks.
func TestClaimStartsAtTheFloor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	// Three tasks, each enqueued by its own transaction: three available_at.
	var ids []int64
	for range 3 {
		runs, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{oneTask("f", "a", "default")})
		require.NoError(t, err)
		ids = append(ids, runs[0].ID)
	}
	at := map[int64]time.Time{}
	rows, err := b.db.SQL.QueryContext(ctx, `SELECT run_id, available_at FROM cairn.tasks`)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		var a time.Time
		require.NoError(t, rows.Scan(&id, &a))
		at[id] = a
	}
	require.NoError(t, rows.Err())
	require.True(t, at[ids[0]].Before(at[ids[1]]), "tasks enqueued one after the other: %v", at)

	lowest, ok, err := b.st.TaskClaimFloor(ctx, "default", w)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, store.ClaimFloor{Priority: 0, At: at[ids[0]]}, store.ClaimFloor{Priority: lowest.Priority, At: lowest.At.In(at[ids[0]].Location())})

	claim := func(f store.ClaimFloor) []int64 {
		t.Helper()
		got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{10}, Lease: time.Minute,
			Floors: map[string]store.ClaimFloor{"default": f}})
		require.NoError(t, err)
		var runs []int64
		for _, c := range got {
			runs = append(runs, c.RunID)
		}
		return runs
	}
	require.Equal(t, []int64{ids[1], ids[2]}, claim(store.ClaimFloor{Priority: 0, At: at[ids[1]]}), "the first task is below the floor")

	// A task of a higher priority (a lower number) is claimed whatever
	// the floor; the first task is still below it.
	hi := oneTask("f", "a", "default")
	hi.Priority = -1
	runs, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{hi})
	require.NoError(t, err)
	require.Equal(t, []int64{runs[0].ID}, claim(store.ClaimFloor{Priority: 0, At: time.Now().Add(time.Hour)}))

	lowest, ok, err = b.st.TaskClaimFloor(ctx, "default", w)
	require.NoError(t, err)
	require.True(t, ok, "the first task is still ready")
	require.True(t, lowest.At.Equal(at[ids[0]]), "lowest %v, want %v", lowest.At, at[ids[0]])
	require.Equal(t, []int64{ids[0]}, claim(store.ClaimFloor{}), "no floor: the scan starts at the start")
	_, ok, err = b.st.TaskClaimFloor(ctx, "default", w)
	require.NoError(t, err)
	require.False(t, ok, "nothing left to claim")

	// The plan: the floor bounds the claim index's scan.
	plan := explainLines(t, b, "EXPLAIN (COSTS OFF) "+b.st.ClaimQuery(8),
		"{default}", "{8}", "{0}", "{1}", w, w, 60000, b.st.EventsChannel(), b.st.ReadyChannel(), b.st.ControlChannel(), false)
	text := strings.Join(plan, "\n")
	found := false
	for i, line := range plan {
		if strings.Contains(line, "Index Cond:") && strings.Contains(line, "priority, ") && strings.Contains(line, "available_at) >=") &&
			i > 0 && strings.Contains(plan[i-1], "tasks_claim") {
			found = true
		}
	}
	require.True(t, found, "the floor is a condition of the claim index scan:\n%s", text)
}

// explainLines runs an EXPLAIN statement and returns its plan's lines.
func explainLines(t *testing.T, b bundle, query string, args ...any) []string {
	t.Helper()
	rows, err := b.db.SQL.QueryContext(context.Background(), query, args...)
	require.NoError(t, err)
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
	}
	require.NoError(t, rows.Err())
	return plan
}
