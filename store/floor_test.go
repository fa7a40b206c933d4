package store_test

import (
	"context"
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
// whose available_at is below it, in any key. TaskKeyedFloor finds the
// least available_at of the keyed tasks the worker could claim (not those
// of a paused run, not those its handles exclude), from a floor on or
// from the start, and the database's now() when there is none. The floor
// is a condition of both index scans a keyed claim makes of
// tasks_claim_keyed (the walk across keys and each key's read), so that
// they pass over the entries below it without visiting the heap.
func TestKeyedClaimStartsAtTheKeyedFloor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 200})
	require.NoError(t, err)
	other, err := b.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: "other", Queues: map[string]int{"default": 1},
		Handles: []string{"x.y"}})
	require.NoError(t, err)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 100}
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

	floor := func(worker int64, from time.Time) time.Time {
		t.Helper()
		f, err := b.st.TaskKeyedFloor(ctx, "default", worker, from)
		require.NoError(t, err)
		return f
	}
	require.True(t, floor(w, time.Time{}).Equal(at[ids[0]]), "from the start: the first task")
	require.True(t, floor(w, at[ids[1]]).Equal(at[ids[1]]), "from the second task on: the second")
	require.True(t, floor(other, time.Time{}).After(at[ids[2]]), "a worker that runs none of them: now")

	claim := func(f time.Time) []int64 {
		t.Helper()
		// 200: more than two keys' shares, so the walk visits both.
		p := store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{200}, Lease: time.Minute, Keyed: true}
		if !f.IsZero() {
			p.KeyedFloors = map[string]time.Time{"default": f}
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
	require.Equal(t, []int64{ids[1], ids[2]}, claim(at[ids[1]]), "k1's first task is below the floor; k2's and k1's second are not")
	require.True(t, floor(w, time.Time{}).Equal(at[ids[0]]), "the first task is still ready")
	require.Equal(t, []int64{ids[0]}, claim(time.Time{}), "no floor: every key from its start")
	require.True(t, floor(w, time.Time{}).After(at[ids[2]]), "nothing left to claim: now")

	// A task of a paused run is not one the claims could take.
	paused := insertRuns(t, b, keyedTask("w", "default", `{"t": "k1"}`, conc, nil))[0]
	task, err := b.st.TaskGet(ctx, paused)
	require.NoError(t, err)
	require.True(t, floor(w, time.Time{}).Equal(task.AvailableAt))
	_, changed, err := b.st.RunSetPaused(ctx, task.RunID, true)
	require.NoError(t, err)
	require.True(t, changed)
	require.True(t, floor(w, time.Time{}).After(task.AvailableAt), "a paused run's task does not hold the floor down")

	// A key's tasks of a later priority (a larger number) come after its
	// first priority's in the index, however long they have waited: the
	// floor is the earliest of any priority.
	later := keyedTask("w", "default", `{"t": "k3"}`, conc, nil)
	later.Priority = 5
	old := insertRuns(t, b, later)[0]
	insertRuns(t, b, keyedTask("w", "default", `{"t": "k3"}`, conc, nil))
	task, err = b.st.TaskGet(ctx, old)
	require.NoError(t, err)
	require.True(t, floor(w, time.Time{}).Equal(task.AvailableAt), "k3's priority 5 task, enqueued first")

	// The floor's read visits each (key, priority) group twice, by index
	// descents: it reads no other task.
	floorPlan := strings.Join(explainLines(t, b, "EXPLAIN (COSTS OFF) "+b.st.Query("TaskKeyedFloor"), "default", w, 0), "\n")
	require.NotContains(t, floorPlan, "Seq Scan on tasks", floorPlan)
	require.Contains(t, floorPlan, "(ROW(fair_key, priority) > ROW(", "the skip scan's step is an index condition:\n%s", floorPlan)
	require.NotContains(t, floorPlan, "Sort", "each step one index descent, no sort:\n%s", floorPlan)

	// The plan: the floor bounds both scans of tasks_claim_keyed.
	plan := explainLines(t, b, "EXPLAIN (COSTS OFF) "+b.st.KeyedClaimQuery(),
		"{default}", "{8}", "{0}", "{0}", "{1}", w, "{}", w, 60000, b.st.EventsChannel(), b.st.ReadyChannel(), b.st.ControlChannel(), false)
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
	// A key's first entries in claim order are mostly those its last turn
	// claimed: dead, and in a busy queue not yet removable, so each is a
	// heap visit. The walk's step passes over them once and gives the
	// key's first live entry; the count of the key's tasks (one per step)
	// and the key's read start there.
	started := 0
	for i, line := range plan {
		if strings.Contains(line, "Index Cond:") && strings.Contains(line, "ROW(priority, available_at, id) >= ROW(") &&
			i > 0 && strings.Contains(plan[i-1], "tasks_claim_keyed") {
			started++
		}
	}
	require.Equal(t, 5, started, "the count in each step and the key's read start at the walk's position:\n%s", strings.Join(plan, "\n"))
}
