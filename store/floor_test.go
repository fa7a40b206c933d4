package store_test

import (
	"context"
	"fmt"
	"slices"
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

// A keyed claim starts at its queue's keyed floor: it takes no keyed task
// whose available_at is below it, except those of the floor's old keys,
// which it reads from their start. TaskKeyedFloor puts the floor a margin
// below now and lists as old the keys with claimable tasks below it (not
// those of a paused run, not those the worker's handles exclude), from a
// floor on or from the start; past KeyedFloorMaxOld old keys, the floor
// is the margin below the oldest task instead. The floor is a condition of
// both index scans a keyed claim makes of tasks_claim_keyed (the walk
// across keys and each key's read), so that they pass over the entries
// below it without visiting the heap, and the walk reads each key once.
func TestKeyedClaimStartsAtTheKeyedFloor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 40})
	require.NoError(t, err)
	other, err := b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "other", Queues: map[string]int{"default": 1},
		Handles: []string{"x.y"}})
	require.NoError(t, err)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 100}
	key := func(v string) string { return store.FlowKey('c', "tenant", v) }
	// Each enqueued by its own transaction: k1, k2, k1.
	var ids []int64
	for _, k := range []string{"k1", "k2", "k1"} {
		ids = append(ids, insertRuns(t, b, keyedTask("w", "default", `{"t": "`+k+`"}`, conc, nil))...)
	}
	at := map[int64]time.Time{}
	for _, id := range ids {
		task, err := b.st.TaskGet(ctx, id)
		require.NoError(t, err)
		at[id] = task.AvailableAt
	}
	require.True(t, at[ids[0]].Before(at[ids[1]]) && at[ids[1]].Before(at[ids[2]]), "enqueued one after the other: %v", at)

	floor := func(worker int64, from time.Time, margin time.Duration) store.KeyedFloor {
		t.Helper()
		f, err := b.st.TaskKeyedFloor(ctx, "default", worker, from, margin)
		require.NoError(t, err)
		return f
	}
	f := floor(w, time.Time{}, 0)
	require.True(t, f.At.After(at[ids[2]]), "the floor is now")
	require.Equal(t, []string{key("k1"), key("k2")}, f.Old, "both keys have tasks below it")
	f = floor(w, time.Time{}, time.Hour)
	require.True(t, f.At.Before(at[ids[0]]), "an hour back")
	require.Empty(t, f.Old)
	require.Empty(t, floor(other, time.Time{}, 0).Old, "a worker that runs none of them")

	claim := func(f store.KeyedFloor) []int64 {
		t.Helper()
		// 40: more than two keys' shares, so the walk visits both.
		p := store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{40}, Lease: time.Minute, Keyed: true}
		if !f.At.IsZero() {
			p.KeyedFloors = map[string]store.KeyedFloor{"default": f}
		}
		got, err := b.st.TaskClaim(ctx, p)
		require.NoError(t, err)
		var tasks []int64
		for _, c := range got {
			tasks = append(tasks, c.ID)
		}
		slices.Sort(tasks)
		return tasks
	}
	require.Equal(t, []int64{ids[1], ids[2]}, claim(store.KeyedFloor{At: at[ids[1]]}), "k1's first task is below the floor; k2's and k1's second are not")
	require.Equal(t, []int64{ids[0]}, claim(store.KeyedFloor{At: time.Now().Add(time.Hour), Old: []string{key("k1")}}),
		"an old key is read from its start, whatever the floor")
	f = floor(w, time.Time{}, 0)
	require.Empty(t, f.Old, "nothing left to claim")

	// A task of a paused run is not one the claims could take.
	paused := insertRuns(t, b, keyedTask("w", "default", `{"t": "k3"}`, conc, nil))[0]
	require.Equal(t, []string{key("k3")}, floor(w, time.Time{}, 0).Old)
	task, err := b.st.TaskGet(ctx, paused)
	require.NoError(t, err)
	_, changed, err := b.st.RunSetPaused(ctx, task.RunID, true)
	require.NoError(t, err)
	require.True(t, changed)
	require.Empty(t, floor(w, time.Time{}, 0).Old, "a paused run's task does not count")

	// Past KeyedFloorMaxOld old keys, the floor is below the oldest task.
	var many []store.RunInsertParams
	for i := range store.KeyedFloorMaxOld + 1 {
		many = append(many, keyedTask("w", "default", fmt.Sprintf(`{"t": "m%d"}`, i), conc, nil))
	}
	first := insertRuns(t, b, many...)[0]
	task, err = b.st.TaskGet(ctx, first)
	require.NoError(t, err)
	f = floor(w, time.Time{}, time.Millisecond)
	require.Empty(t, f.Old)
	require.True(t, f.At.Equal(task.AvailableAt.Add(-time.Millisecond)), "floor %v, oldest task %v", f.At, task.AvailableAt)

	// The plan: the floor bounds both scans of tasks_claim_keyed.
	plan := explainLines(t, b, "EXPLAIN (COSTS OFF) "+b.st.KeyedClaimQuery(8),
		"{default}", "{8}", "{0}", "{0}", "{1}", w, "{}", "{}", "{}", w, 60000, b.st.EventsChannel(), b.st.ReadyChannel(), b.st.ControlChannel(), false)
	floored, walks := 0, 0
	for i, line := range plan {
		if strings.Contains(line, "Index Cond:") && strings.Contains(line, "available_at >=") &&
			i > 0 && strings.Contains(plan[i-1], "tasks_claim_keyed") {
			floored++
			if strings.Contains(line, "fair_key >") {
				walks++
			}
		}
	}
	require.GreaterOrEqual(t, floored, 3, "the keyed floor is a condition of the walk's and the keys' index scans:\n%s", strings.Join(plan, "\n"))
	// The walk's two loops (from the turn on, then wrapping around) each
	// have a first step and a next step, and each step reads the next
	// key once.
	require.Equal(t, 4, walks, "one index scan per step of the key walk:\n%s", strings.Join(plan, "\n"))
}
