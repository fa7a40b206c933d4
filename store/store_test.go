package store_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	db *pgtest.DB
	st *store.Store
}

func setup(t *testing.T) bundle {
	t.Helper()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(context.Background(), []string{"default"}))
	return bundle{db: db, st: st}
}

// countRows returns the count query reads from b's database.
func countRows(t *testing.T, b bundle, query string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.SQL.QueryRow(query).Scan(&n), query)
	return n
}

func single(n int) []store.RunInsertParams {
	ps := make([]store.RunInsertParams, n)
	for i := range ps {
		ps[i] = store.RunInsertParams{Workflow: "one", Input: json.RawMessage(`{}`), Queue: "default",
			Tasks: []store.TaskTemplate{{Idx: 0, Name: "only", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}
	}
	return ps
}

func diamond() store.RunInsertParams {
	return store.RunInsertParams{Workflow: "diamond", Input: json.RawMessage(`{"x":1}`), Queue: "default",
		Tasks: []store.TaskTemplate{
			{Idx: 0, Name: "a", MaxAttempts: 1, MaxRescues: 3, Deps: []int{}, Dependents: []int{1, 2}},
			{Idx: 1, Name: "b", MaxAttempts: 1, MaxRescues: 3, Deps: []int{0}, Dependents: []int{3}},
			{Idx: 2, Name: "c", MaxAttempts: 1, MaxRescues: 3, Deps: []int{0}, Dependents: []int{3}},
			{Idx: 3, Name: "d", MaxAttempts: 1, MaxRescues: 3, Deps: []int{1, 2}, Dependents: []int{}},
		}}
}

func TestConcurrentClaimsNeverShareARow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const total = 10000
	for i := 0; i < total; i += 2500 {
		_, err := b.st.RunInsertMany(ctx, single(2500))
		require.NoError(t, err)
	}
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 50})
			if err != nil {
				t.Error(err)
				return
			}
			for {
				got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: id, Queues: []string{"default"}, Limits: []int{50}, Lease: time.Minute})
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, c := range got {
					seen[c.ID]++
					require.Equal(t, store.StatusRunning, c.Status)
					require.Equal(t, 1, c.Attempt)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, seen, total, "every ready row claimed")
	for id, n := range seen {
		require.Equal(t, 1, n, "task %d claimed %d times", id, n)
	}
}

func TestTransitionIsCompareAndSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(1))
	require.NoError(t, err)
	w1, _ := b.st.WorkerInsert(ctx, "w1", map[string]int{"default": 1})
	w2, _ := b.st.WorkerInsert(ctx, "w2", map[string]int{"default": 1})
	got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w1, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 1)
	id := got[0].ID

	// Another worker cannot complete it.
	moved, err := b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w2,
		Items: []store.TransitionItem{{TaskID: id, To: store.StatusCompleted}}})
	require.NoError(t, err)
	require.Empty(t, moved)
	// A stale expected state changes nothing.
	moved, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusReady}, WorkerID: w1,
		Items: []store.TransitionItem{{TaskID: id, To: store.StatusCompleted}}})
	require.NoError(t, err)
	require.Empty(t, moved)
	// A stale attempt changes nothing.
	moved, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w1,
		Items: []store.TransitionItem{{TaskID: id, To: store.StatusCompleted, Attempt: 2}}})
	require.NoError(t, err)
	require.Empty(t, moved)
	task, err := b.st.TaskGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.StatusRunning, task.Status)

	// The holder wins, once.
	moved, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w1,
		Items: []store.TransitionItem{{TaskID: id, To: store.StatusCompleted, Attempt: 1, Output: json.RawMessage(`{"ok":true}`)}}})
	require.NoError(t, err)
	require.Len(t, moved, 1)
	moved, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w1,
		Items: []store.TransitionItem{{TaskID: id, To: store.StatusCompleted}}})
	require.NoError(t, err)
	require.Empty(t, moved)

	task, err = b.st.TaskGet(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.StatusCompleted, task.Status)
	require.JSONEq(t, `{"ok":true}`, string(task.Output))
	require.Nil(t, task.WorkerID)
	run, err := b.st.RunGet(ctx, task.RunID)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, run.Status)
	require.NotNil(t, run.FinishedAt)
}

func TestEveryTransitionWritesOneEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{diamond()})
	require.NoError(t, err)
	runID := res[0].ID
	w, _ := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 4})

	transitions := 0 // a task's creation is its row, not an event
	for done := 0; done < 4; {
		got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{4}, Lease: time.Minute})
		require.NoError(t, err)
		require.NotEmpty(t, got, "a task must be ready until all are done")
		transitions += len(got)
		items := make([]store.TransitionItem, len(got))
		for i, c := range got {
			items[i] = store.TransitionItem{TaskID: c.ID, To: store.StatusCompleted, Output: json.RawMessage(`{"` + c.Name + `":1}`)}
		}
		moved, err := b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: items})
		require.NoError(t, err)
		require.Len(t, moved, len(got))
		transitions += len(moved)
		done += len(moved)
	}
	// b, c and d were promoted not_started -> ready.
	transitions += 3

	events, err := b.st.EventListByRun(ctx, runID)
	require.NoError(t, err)
	require.Len(t, events, transitions)
	perTask := map[int64][]string{}
	for _, e := range events {
		from := "new"
		if e.From != nil {
			from = *e.From
		}
		perTask[e.TaskID] = append(perTask[e.TaskID], from+">"+e.To)
	}
	tasks, err := b.st.TaskListByRun(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, []string{"ready>running", "running>completed"}, perTask[tasks[0].ID])
	require.Equal(t, []string{"not_started>ready", "ready>running", "running>completed"}, perTask[tasks[3].ID])
	run, err := b.st.RunGet(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, run.Status)
}

func TestSkipPropagatesAndRunFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{diamond()})
	require.NoError(t, err)
	w, _ := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 4})
	got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{4}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 1)
	msg := "boom"
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: got[0].ID, To: store.StatusFailed, Error: &msg}}})
	require.NoError(t, err)
	tasks, err := b.st.TaskListByRun(ctx, res[0].ID)
	require.NoError(t, err)
	var states []string
	for _, tk := range tasks {
		states = append(states, tk.Status)
	}
	require.Equal(t, []string{"failed", "skipped", "skipped", "skipped"}, states)
	run, err := b.st.RunGet(ctx, res[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, run.Status)
}

func TestIdempotencyKeyReturnsLiveRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	key := "k1"
	ps := single(3)
	for i := range ps {
		ps[i].Key = &key
	}
	res, err := b.st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	require.False(t, res[0].Existing)
	require.True(t, res[1].Existing)
	require.Equal(t, res[0].ID, res[1].ID)
	require.Equal(t, res[0].ID, res[2].ID)
}

func TestPausedQueueAndRunAreNotClaimed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	res, err := b.st.RunInsertMany(ctx, single(2))
	require.NoError(t, err)
	w, _ := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 4})
	claim := func() int {
		got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{4}, Lease: time.Minute})
		require.NoError(t, err)
		return len(got)
	}
	require.NoError(t, b.st.QueueSetPaused(ctx, "default", true))
	require.Zero(t, claim())
	require.NoError(t, b.st.QueueSetPaused(ctx, "default", false))
	status, changed, err := b.st.RunSetPaused(ctx, res[0].ID, true)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, store.RunPending, status, "the status it had")
	run, err := b.st.RunGet(ctx, res[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.RunPaused, run.Status)
	require.Equal(t, 1, claim())
	_, changed, err = b.st.RunSetPaused(ctx, res[0].ID, false)
	require.NoError(t, err)
	require.True(t, changed)
	require.Equal(t, 1, claim())
	_, _, err = b.st.RunSetPaused(ctx, 999999, true)
	require.ErrorIs(t, err, store.ErrNotFound)
}

func TestRunSetPausedLeavesFinishedRunsAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	res, err := b.st.RunInsertMany(ctx, single(1))
	require.NoError(t, err)
	w, _ := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 4})
	got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{4}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 1)
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning},
		Items: []store.TransitionItem{{TaskID: got[0].ID, To: store.StatusCancelled}}})
	require.NoError(t, err)
	before, err := b.st.RunGet(ctx, res[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.RunCancelled, before.Status)

	for _, paused := range []bool{true, false} {
		status, changed, err := b.st.RunSetPaused(ctx, res[0].ID, paused)
		require.NoError(t, err)
		require.False(t, changed, "a finished run is left alone")
		require.Equal(t, store.RunCancelled, status)
	}
	after, err := b.st.RunGet(ctx, res[0].ID)
	require.NoError(t, err)
	require.Equal(t, before.Paused, after.Paused)
	require.Equal(t, before.UpdatedAt, after.UpdatedAt, "not written")
}

func TestCappedQueueHonoursCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(10))
	require.NoError(t, err)
	cap3 := 3
	require.NoError(t, b.st.QueueSetCap(ctx, "default", &cap3))
	w, _ := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	got, err := b.st.TaskClaimCapped(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{10}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 3)
	got, err = b.st.TaskClaimCapped(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{10}, Lease: time.Minute})
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestHeartbeatRenewsHeldLeases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(3))
	require.NoError(t, err)
	w, got := claimingWorker(t, b, "w", 2)
	held, err := b.st.WorkerHeartbeat(ctx, store.WorkerHeartbeatParams{WorkerID: w, Lease: time.Hour})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{got[0].ID, got[1].ID}, held)
	for _, c := range got {
		tk, err := b.st.TaskGet(ctx, c.ID)
		require.NoError(t, err)
		require.True(t, tk.LeaseExpiresAt.After(time.Now().Add(50*time.Minute)), "lease renewed")
	}
	expired, err := b.st.TaskExpiredLeases(ctx, time.Time{}, 10)
	require.NoError(t, err)
	require.Empty(t, expired)
}

func TestHeartbeatRenewsOnlyDueLeasesAndReportsAllHeld(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(2))
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 2})
	require.NoError(t, err)
	soon, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Millisecond})
	require.NoError(t, err)
	later, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: 2 * time.Hour})
	require.NoError(t, err)
	require.Len(t, soon, 1)
	require.Len(t, later, 1)
	before, err := b.st.TaskGet(ctx, later[0].ID)
	require.NoError(t, err)

	held, err := b.st.WorkerHeartbeat(ctx, store.WorkerHeartbeatParams{WorkerID: w, Lease: time.Hour, RenewWithin: 30 * time.Minute})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{soon[0].ID, later[0].ID}, held, "every held task is reported")
	tk, err := b.st.TaskGet(ctx, soon[0].ID)
	require.NoError(t, err)
	require.True(t, tk.LeaseExpiresAt.After(time.Now().Add(50*time.Minute)), "the lease due is renewed")
	tk, err = b.st.TaskGet(ctx, later[0].ID)
	require.NoError(t, err)
	require.True(t, tk.LeaseExpiresAt.Equal(*before.LeaseExpiresAt), "a lease far from expiry is left alone: %s -> %s", before.LeaseExpiresAt, tk.LeaseExpiresAt)
}

// A beat that reads the listed tasks and the recent ones also finds the
// tasks the worker holds, unlisted, whose lease runs past now: not one
// whose lease ran out (the rescuer's), nor another worker's.
func TestHeartbeatRecentFindsUnlistedTasksWithALiveLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, w, mine, theirs := twoClaimingWorkers(t)
	listed, live, expired := mine[0].ID, mine[1].ID, mine[2].ID
	_, err := b.db.SQL.ExecContext(ctx, `UPDATE cairn.tasks SET lease_expires_at = now() + interval '1 hour' WHERE id IN ($1, $2, $3)`,
		live, listed, theirs[0].ID)
	require.NoError(t, err)
	_, err = b.db.SQL.ExecContext(ctx, `UPDATE cairn.tasks SET lease_expires_at = now() - interval '1 minute' WHERE id = $1`, expired)
	require.NoError(t, err)

	held, err := b.st.WorkerHeartbeat(ctx, store.WorkerHeartbeatParams{WorkerID: w, Lease: time.Hour, Only: []int64{listed}, Recent: true})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{listed, live}, held)
	held, err = b.st.WorkerHeartbeat(ctx, store.WorkerHeartbeatParams{WorkerID: w, Lease: time.Hour, Only: []int64{listed, expired}, Recent: true})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{listed, live, expired}, held, "a listed task is read whatever its lease")
}

// A beat limited to listed tasks reads them by primary key: it returns
// and renews those the worker holds, and leaves the others, held or not.
func TestHeartbeatOnlyReadsTheListedTasks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, w, mine, theirs := twoClaimingWorkers(t)
	listed, unlisted := []int64{mine[0].ID, mine[1].ID, theirs[0].ID}, mine[2].ID
	before, err := b.st.TaskGet(ctx, unlisted)
	require.NoError(t, err)

	held, err := b.st.WorkerHeartbeat(ctx, store.WorkerHeartbeatParams{WorkerID: w, Lease: time.Hour, Only: listed})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{mine[0].ID, mine[1].ID}, held, "the listed tasks the worker holds")
	lease := func(id int64) time.Time {
		tk, err := b.st.TaskGet(ctx, id)
		require.NoError(t, err)
		return *tk.LeaseExpiresAt
	}
	require.True(t, lease(mine[0].ID).After(time.Now().Add(50*time.Minute)), "a listed lease is renewed")
	require.True(t, lease(unlisted).Equal(*before.LeaseExpiresAt), "an unlisted one is left alone")
	require.True(t, lease(theirs[0].ID).Before(time.Now()), "another worker's is left alone")

	held, err = b.st.WorkerHeartbeat(ctx, store.WorkerHeartbeatParams{WorkerID: w, Lease: time.Hour, Only: []int64{}})
	require.NoError(t, err)
	require.Empty(t, held, "an empty list reads nothing")
	held, err = b.st.WorkerHeartbeat(ctx, store.WorkerHeartbeatParams{WorkerID: w, Lease: time.Hour})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{mine[0].ID, mine[1].ID, unlisted}, held, "no list: everything the worker holds")
}

// claimingWorker registers a worker of n slots and claims n ready tasks
// for it, their leases already expired (every beat renews them).
func claimingWorker(t *testing.T, b bundle, name string, n int) (int64, []store.Claimed) {
	t.Helper()
	ctx := context.Background()
	w, err := b.st.WorkerInsert(ctx, name, map[string]int{"default": n})
	require.NoError(t, err)
	got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{n}, Lease: time.Millisecond})
	require.NoError(t, err)
	require.Len(t, got, n)
	return w, got
}

// twoClaimingWorkers inserts four one-task runs and claims three for a
// worker "w" (returned with its tasks) and one for "other".
func twoClaimingWorkers(t *testing.T) (b bundle, w int64, mine, theirs []store.Claimed) {
	t.Helper()
	b = setup(t)
	_, err := b.st.RunInsertMany(context.Background(), single(4))
	require.NoError(t, err)
	w, mine = claimingWorker(t, b, "w", 3)
	_, theirs = claimingWorker(t, b, "other", 1)
	return b, w, mine, theirs
}

// heldPairOneLocked claims two tasks for a new worker (claimingWorker)
// and locks the first one's row (lock: "UPDATE", "SHARE") in a
// transaction the caller ends.
func heldPairOneLocked(t *testing.T, b bundle, lock string) (worker, locked, other int64, tx *sql.Tx) {
	t.Helper()
	ctx := context.Background()
	_, err := b.st.RunInsertMany(ctx, single(2))
	require.NoError(t, err)
	worker, got := claimingWorker(t, b, "w", 2)
	tx, err = b.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	_, err = tx.ExecContext(ctx, `SELECT 1 FROM cairn.tasks WHERE id = $1 FOR `+lock, got[0].ID)
	require.NoError(t, err)
	return worker, got[0].ID, got[1].ID, tx
}

// A beat does not wait on a task row another transaction keeps locked
// longer than LockWait: it reports the task held, renews the others and
// leaves that row's lease to the next beat.
func TestHeartbeatSkipsLockedRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w, locked, free, _ := heldPairOneLocked(t, b, "UPDATE")

	beat, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	held, err := b.st.WorkerHeartbeat(beat, store.WorkerHeartbeatParams{WorkerID: w, Lease: time.Hour, LockWait: 200 * time.Millisecond})
	require.NoError(t, err, "the beat waits for the locked row no longer than LockWait")
	require.ElementsMatch(t, []int64{locked, free}, held)
	lease := func(id int64) time.Time {
		tk, err := b.st.TaskGet(ctx, id)
		require.NoError(t, err)
		return *tk.LeaseExpiresAt
	}
	require.True(t, lease(free).After(time.Now().Add(50*time.Minute)), "the free row's lease is renewed")
	require.True(t, lease(locked).Before(time.Now()), "the locked row's is left for the next beat")
}

// A beat renews a row it found locked once the lock is released,
// waiting for it while holding no other row: the transaction holding the
// lock can then lock the beat's other rows without a deadlock. (A
// handler that spawns child runs back to back holds its task row FOR
// SHARE most of the time; a beat that only skipped it let its lease run
// out.)
func TestHeartbeatWaitsForLockedRowsHoldingNoOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	w, locked, other, tx := heldPairOneLocked(t, b, "SHARE")

	type result struct {
		held []int64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		held, err := b.st.WorkerHeartbeat(ctx, store.WorkerHeartbeatParams{WorkerID: w, Lease: time.Hour, LockWait: time.Minute})
		done <- result{held, err}
	}()
	// The beat waits on the locked row's lock...
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, b.db.SQL.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'UPDATE%lease_expires_at%'`).Scan(&n))
		return n == 1
	}, 30*time.Second, 10*time.Millisecond)
	// ...holding none of its other rows: the lock holder takes one.
	move, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := tx.ExecContext(move, `UPDATE cairn.tasks SET updated_at = now() WHERE id = $1`, other)
	require.NoError(t, err, "the beat holds no lock while it waits")
	require.NoError(t, tx.Commit())

	r := <-done
	require.NoError(t, r.err)
	require.ElementsMatch(t, []int64{locked, other}, r.held)
	for _, id := range []int64{locked, other} {
		tk, err := b.st.TaskGet(ctx, id)
		require.NoError(t, err)
		require.True(t, tk.LeaseExpiresAt.After(time.Now().Add(50*time.Minute)), "task %d's lease is renewed", id)
	}
}

func TestTaskResumeBatchMovesOnlyTasksStillDeferredHere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(3))
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 3})
	require.NoError(t, err)
	got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{3}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, got, 3)
	items := make([]store.TransitionItem, len(got))
	for i, c := range got {
		items[i] = store.TransitionItem{TaskID: c.ID, To: store.StatusDeferred, Attempt: c.Attempt}
	}
	parked, err := b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: items})
	require.NoError(t, err)
	require.Len(t, parked, 3, "one statement parks the batch")
	// One is cancelled while parked; another is named with a stale attempt.
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusDeferred},
		Items: []store.TransitionItem{{TaskID: got[0].ID, To: store.StatusCancelled}}})
	require.NoError(t, err)
	moved, err := b.st.TaskResumeBatch(ctx, store.TaskResumeParams{WorkerID: w, Lease: time.Hour, Tasks: []store.ResumeTask{
		{ID: got[0].ID, Attempt: got[0].Attempt}, {ID: got[1].ID, Attempt: got[1].Attempt + 1}, {ID: got[2].ID, Attempt: got[2].Attempt},
	}})
	require.NoError(t, err)
	require.Len(t, moved, 1)
	require.Equal(t, got[2].ID, moved[0].TaskID)
	require.Equal(t, store.StatusDeferred, moved[0].From)
	require.Equal(t, store.StatusRunning, moved[0].To)
	tk, err := b.st.TaskGet(ctx, got[2].ID)
	require.NoError(t, err)
	require.True(t, tk.LeaseExpiresAt.After(time.Now().Add(50*time.Minute)), "the lease is renewed")
	tk, err = b.st.TaskGet(ctx, got[1].ID)
	require.NoError(t, err)
	require.Equal(t, store.StatusDeferred, tk.Status, "a stale attempt moves nothing")
	events, err := b.st.EventListByTask(ctx, got[2].ID)
	require.NoError(t, err)
	require.Equal(t, store.StatusRunning, events[len(events)-1].To, "the resume is recorded")
}

func TestTaskDeferAndClaimClaimsOnlyForTasksParked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(6))
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 3})
	require.NoError(t, err)
	running := claimAll(t, b.st, w, 3)
	require.Len(t, running, 3)
	// One of the three is taken meanwhile: its park does not move, and
	// frees no slot to claim for.
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning},
		Items: []store.TransitionItem{{TaskID: running[0].ID, To: store.StatusCancelled}}})
	require.NoError(t, err)
	items := make([]store.TransitionItem, len(running))
	for i, c := range running {
		items[i] = store.TransitionItem{TaskID: c.ID, To: store.StatusDeferred, Attempt: c.Attempt}
	}
	moved, claimed, err := b.st.TaskDeferAndClaim(ctx, store.TaskDeferClaimParams{
		Park:   store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: items},
		Queues: []string{"default"}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, moved, 2)
	require.Len(t, claimed, 2, "one claim per parked task")
	var n int
	require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM cairn.tasks WHERE worker_id = $1 AND status = 'running'`, w).Scan(&n))
	require.Equal(t, 2, n, "running rows: the two claimed")
	require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM cairn.tasks WHERE worker_id = $1 AND status = 'deferred'`, w).Scan(&n))
	require.Equal(t, 2, n)
}

// QueueEnsure writes a queue row once per store: a name whose row it saw
// committed costs no statement again. A row written in a transaction
// that rolled back is not taken as written.
func TestQueueEnsureWritesAKnownQueueOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rows := func(name string) int {
		var n int
		require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM `+pgtest.Schema+`.queues WHERE name = $1`, name).Scan(&n))
		return n
	}
	require.NoError(t, b.st.QueueEnsure(ctx, []string{"known", "known"}))
	require.Equal(t, 1, rows("known"))
	_, err := b.db.SQL.Exec(`DELETE FROM ` + pgtest.Schema + `.queues WHERE name = 'known'`)
	require.NoError(t, err)
	require.NoError(t, b.st.QueueEnsure(ctx, []string{"known"}))
	require.Equal(t, 0, rows("known"), "a known queue is not written again")

	rollback := errors.New("roll back")
	require.ErrorIs(t, b.st.InTx(ctx, func(tx *store.Store) error {
		require.NoError(t, tx.QueueEnsure(ctx, []string{"rolled"}))
		return rollback
	}), rollback)
	require.Equal(t, 0, rows("rolled"))
	require.NoError(t, b.st.QueueEnsure(ctx, []string{"rolled", "known"}))
	require.Equal(t, 1, rows("rolled"), "a queue written by a transaction that rolled back is written again")
}
