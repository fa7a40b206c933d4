package store_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// A claim leaves its run row alone (migration 019): the stored status
// stays pending while runs (the view), and every reader of the store, reads the
// run as running from its task. The task's next transition stores it,
// except for a fast run, whose row no transition writes.

func storedRun(t *testing.T, b bundle, id int64) (status string, started *time.Time) {
	t.Helper()
	require.NoError(t, b.db.SQL.QueryRow(`SELECT status, started_at FROM cairn.run_rows WHERE id = $1`, id).Scan(&status, &started))
	return status, started
}

// claimedRuns inserts the one-task runs ps and claims their tasks for a
// new worker with a slot for each; it returns the claims by run.
func claimedRuns(t *testing.T, b bundle, ps []store.RunInsertParams) ([]store.RunInserted, int64, map[int64]store.Claimed) {
	t.Helper()
	ctx := context.Background()
	runs, err := b.st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": len(ps)})
	require.NoError(t, err)
	got := claimAll(t, b.st, w, len(ps))
	require.Len(t, got, len(ps))
	byRun := make(map[int64]store.Claimed, len(got))
	for _, c := range got {
		byRun[c.RunID] = c
	}
	return runs, w, byRun
}

// waitClockPast waits until the database clock has passed at, so that
// the next statement's now() is later.
func waitClockPast(t *testing.T, b bundle, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		now, err := b.st.Now(context.Background())
		require.NoError(t, err)
		if now.After(at) {
			return
		}
		require.True(t, time.Now().Before(deadline), "the database clock did not pass %s", at)
	}
}

func runIDsWith(t *testing.T, b bundle, status string) []int64 {
	t.Helper()
	ids, err := b.st.RunIDListFiltered(context.Background(), &store.RunListParams{Statuses: []string{status}, Limit: 100})
	require.NoError(t, err)
	return ids
}

// withKeys is single(n) with idempotency keys: ordinary runs, not fast ones.
func withKeys(n int) []store.RunInsertParams {
	ps := single(n)
	for i := range ps {
		k := "k" + strconv.Itoa(i)
		ps[i].Key = &k
	}
	return ps
}

func TestClaimedRunReadsRunningUntilItsFinishStoresIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	runs, err := b.st.RunInsertMany(ctx, withKeys(3))
	require.NoError(t, err)
	require.Zero(t, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE run_fast`), "a run with a key is not fast")
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 3})
	require.NoError(t, err)
	got := claimAll(t, b.st, w, 2)
	require.Len(t, got, 2)
	claimedRun, otherRun := got[0].RunID, got[1].RunID
	var idle int64
	for _, r := range runs {
		if r.ID != claimedRun && r.ID != otherRun {
			idle = r.ID
		}
	}
	task, err := b.st.TaskGet(ctx, got[0].ID)
	require.NoError(t, err)
	require.NotNil(t, task.StartedAt)

	status, started := storedRun(t, b, claimedRun)
	require.Equal(t, "pending", status, "the claim wrote the run row")
	require.Nil(t, started)

	run, err := b.st.RunGet(ctx, claimedRun)
	require.NoError(t, err)
	require.Equal(t, "running", run.Status)
	require.NotNil(t, run.StartedAt)
	require.True(t, task.StartedAt.Equal(*run.StartedAt), "run start %s, task start %s", run.StartedAt, task.StartedAt)
	require.False(t, run.UpdatedAt.Before(*task.StartedAt))

	pending, err := b.st.RunGet(ctx, idle)
	require.NoError(t, err)
	require.Equal(t, "pending", pending.Status)
	require.Nil(t, pending.StartedAt)

	require.ElementsMatch(t, []int64{claimedRun, otherRun}, runIDsWith(t, b, "running"))
	require.Equal(t, []int64{idle}, runIDsWith(t, b, "pending"))
	n, err := b.st.RunCountFiltered(ctx, &store.RunListParams{Statuses: []string{"running"}}, 10)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	list, err := b.st.RunListFiltered(ctx, &store.RunListParams{Statuses: []string{"running"}, Limit: 10})
	require.NoError(t, err)
	require.Len(t, list, 2)
	for _, item := range list {
		require.Equal(t, "running", item.Status)
		require.NotNil(t, item.Duration, "a running run has run for some time")
	}
	outcomes, err := b.st.RunStatusList(ctx, []int64{claimedRun, idle})
	require.NoError(t, err)
	require.Equal(t, "running", outcomes[0].Status)
	require.Equal(t, "pending", outcomes[1].Status)

	// The finish stores the run: completed, started when its task was.
	// The claim in the same statement leaves the idle run's row alone.
	_, _, more, err := b.st.TaskFinishAndClaim(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: got[0].ID, To: store.StatusCompleted, Attempt: got[0].Attempt, Output: json.RawMessage(`1`)}}},
		store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, more, 1)
	require.Equal(t, idle, more[0].RunID)
	status, started = storedRun(t, b, claimedRun)
	require.Equal(t, "completed", status)
	require.NotNil(t, started)
	require.True(t, task.StartedAt.Equal(*started), "stored start %s, task start %s", started, task.StartedAt)
	status, _ = storedRun(t, b, idle)
	require.Equal(t, "pending", status)
	run, err = b.st.RunGet(ctx, idle)
	require.NoError(t, err)
	require.Equal(t, "running", run.Status)
}

// A run of several tasks stores, at its first write, the earliest start
// of its tasks, not that of the task whose move wrote it.
func TestFirstWriteStoresTheEarliestStartOfTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	p := store.RunInsertParams{Workflow: "pair", Input: json.RawMessage(`{}`), Queue: "default",
		Tasks: []store.TaskTemplate{
			{Idx: 0, Name: "a", MaxAttempts: 1, MaxRescues: 3, Deps: []int{}, Dependents: []int{}},
			{Idx: 1, Name: "b", MaxAttempts: 1, MaxRescues: 3, Deps: []int{}, Dependents: []int{}},
		}}
	runs, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{p})
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 2})
	require.NoError(t, err)
	first := claimAll(t, b.st, w, 1)
	require.Len(t, first, 1)
	a, err := b.st.TaskGet(ctx, first[0].ID)
	require.NoError(t, err)
	// The second claim's statement must start later than the first's.
	waitClockPast(t, b, *a.StartedAt)
	second := claimAll(t, b.st, w, 1)
	require.Len(t, second, 1)
	bt, err := b.st.TaskGet(ctx, second[0].ID)
	require.NoError(t, err)
	require.True(t, bt.StartedAt.After(*a.StartedAt))

	run, err := b.st.RunGet(ctx, runs[0].ID)
	require.NoError(t, err)
	require.Equal(t, "running", run.Status)
	require.True(t, a.StartedAt.Equal(*run.StartedAt), "read start %s, first task start %s", run.StartedAt, a.StartedAt)

	complete(t, b.st, w, store.StatusCompleted, second[0])
	status, started := storedRun(t, b, runs[0].ID)
	require.Equal(t, "running", status)
	require.NotNil(t, started)
	require.True(t, a.StartedAt.Equal(*started), "stored start %s, first task start %s", started, a.StartedAt)
}

// A fast run (one task, no key, no parent, nothing waiting) is read from
// its task through every transition; its row is never written. Pausing
// it stores the row, reading the same, and makes it an ordinary run.
func TestFastRunIsReadFromItsTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	runs, w, byRun := claimedRuns(t, b, single(3))
	require.Equal(t, 3, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE run_fast`))
	done, failed, live := runs[0].ID, runs[1].ID, runs[2].ID
	complete(t, b.st, w, store.StatusCompleted, byRun[done])
	complete(t, b.st, w, store.StatusFailed, byRun[failed])

	for id, want := range map[int64]string{done: "completed", failed: "failed", live: "running"} {
		status, started := storedRun(t, b, id)
		require.Equal(t, "pending", status, "run %d's row was written", id)
		require.Nil(t, started)
		run, err := b.st.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, run.Status, "run %d", id)
		task, err := b.st.TaskGet(ctx, byRun[id].ID)
		require.NoError(t, err)
		require.True(t, task.StartedAt.Equal(*run.StartedAt), "run %d", id)
		require.Equal(t, task.UpdatedAt, run.UpdatedAt, "run %d", id)
		if want == "running" {
			require.Nil(t, run.FinishedAt)
			require.Zero(t, run.DoneTasks)
			continue
		}
		require.True(t, task.FinishedAt.Equal(*run.FinishedAt), "run %d", id)
		require.Equal(t, 1, run.DoneTasks, "run %d", id)
		require.Equal(t, map[bool]int{true: 1}[want == "failed"], run.FailedTasks, "run %d", id)
	}
	require.Equal(t, []int64{done}, runIDsWith(t, b, "completed"))
	require.Equal(t, []int64{failed}, runIDsWith(t, b, "failed"))
	require.Equal(t, []int64{live}, runIDsWith(t, b, "running"))

	// Pausing a finished fast run leaves it as it reads; its row now says so.
	before, err := b.st.RunGet(ctx, done)
	require.NoError(t, err)
	status, changed, err := b.st.RunSetPaused(ctx, done, true)
	require.NoError(t, err)
	require.False(t, changed)
	require.Equal(t, "completed", status)
	after, err := b.st.RunGet(ctx, done)
	require.NoError(t, err)
	require.Equal(t, before, after)
	status, started := storedRun(t, b, done)
	require.Equal(t, "completed", status)
	require.True(t, before.StartedAt.Equal(*started))
	require.Zero(t, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE run_fast AND run_id = `+strconv.FormatInt(done, 10)))

	// Pausing a live one: an ordinary run from then on, its row written
	// by its finish.
	_, changed, err = b.st.RunSetPaused(ctx, live, true)
	require.NoError(t, err)
	require.True(t, changed)
	_, _, err = b.st.RunSetPaused(ctx, live, false)
	require.NoError(t, err)
	complete(t, b.st, w, store.StatusCompleted, byRun[live])
	status, _ = storedRun(t, b, live)
	require.Equal(t, "completed", status)
}

// A run enqueued after a fast run makes it an ordinary one, whose finish
// writes its row and so sees the waiter: it releases the waiting run's
// roots, whether the awaited run is still running or had already finished
// when the waiter was enqueued.
func TestRunAfterAFastRunIsReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	runs, w, byRun := claimedRuns(t, b, single(2))
	running, finished := runs[0].ID, runs[1].ID
	complete(t, b.st, w, store.StatusCompleted, byRun[finished])

	waiters := single(2)
	waiters[0].After = []int64{running}
	waiters[1].After = []int64{finished}
	ws, err := b.st.RunInsertMany(ctx, waiters)
	require.NoError(t, err)
	require.Zero(t, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE run_fast`), "awaited runs and waiters are not fast")
	rootOf := func(run int64) string {
		ts, err := b.st.TaskListByRun(ctx, run)
		require.NoError(t, err)
		require.Len(t, ts, 1)
		return ts[0].Status
	}
	require.Equal(t, store.StatusReady, rootOf(ws[1].ID), "the run it waits for had finished")
	require.Equal(t, store.StatusNotStarted, rootOf(ws[0].ID))

	complete(t, b.st, w, store.StatusCompleted, byRun[running])
	require.Equal(t, store.StatusReady, rootOf(ws[0].ID), "the finish released the waiter")
	status, _ := storedRun(t, b, running)
	require.Equal(t, "completed", status)
}

// A fast run retried keeps its first start: its task's started_at is the
// latest attempt's, first_started_at the first's.
func TestRetriedFastRunKeepsItsFirstStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	runs, w, byRun := claimedRuns(t, b, single(1))
	first := byRun[runs[0].ID]
	task, err := b.st.TaskGet(ctx, first.ID)
	require.NoError(t, err)
	firstStart := *task.StartedAt
	complete(t, b.st, w, store.StatusReady, first) // a retry, due now
	waitClockPast(t, b, firstStart)
	second := claimAll(t, b.st, w, 1)
	require.Len(t, second, 1)
	require.Equal(t, 2, second[0].Attempt)
	task, err = b.st.TaskGet(ctx, second[0].ID)
	require.NoError(t, err)
	require.True(t, task.StartedAt.After(firstStart))
	require.True(t, firstStart.Equal(*task.FirstStartedAt))
	run, err := b.st.RunGet(ctx, runs[0].ID)
	require.NoError(t, err)
	require.Equal(t, "running", run.Status)
	require.True(t, firstStart.Equal(*run.StartedAt), "run start %s, first attempt %s", run.StartedAt, firstStart)

	complete(t, b.st, w, store.StatusCompleted, second[0])
	run, err = b.st.RunGet(ctx, runs[0].ID)
	require.NoError(t, err)
	require.Equal(t, "completed", run.Status)
	require.True(t, firstStart.Equal(*run.StartedAt))
	status, _ := storedRun(t, b, runs[0].ID)
	require.Equal(t, "pending", status, "a fast run's row is not written")
}

// An enqueue that waits for a fast run, racing that run's finish, never
// leaves the waiter behind: whichever commits first, the waiter's root is
// released once both have.
func TestRunAfterAFastRunRacingItsFinishIsReleased(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const rounds = 40
	runs, w, byRun := claimedRuns(t, b, single(rounds))
	for i, run := range runs {
		waiter := single(1)
		waiter[0].After = []int64{run.ID}
		var wg sync.WaitGroup
		var finishErr, enqueueErr error
		var ws []store.RunInserted
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, finishErr = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
				Items: []store.TransitionItem{{TaskID: byRun[run.ID].ID, To: store.StatusCompleted, Attempt: 1}}})
		}()
		go func() {
			defer wg.Done()
			ws, enqueueErr = b.st.RunInsertMany(ctx, waiter)
		}()
		wg.Wait()
		require.NoError(t, finishErr, "round %d", i)
		require.NoError(t, enqueueErr, "round %d", i)
		ts, err := b.st.TaskListByRun(ctx, ws[0].ID)
		require.NoError(t, err)
		require.Equal(t, store.StatusReady, ts[0].Status, "round %d: the waiter was left behind", i)
	}
}

// A bulk delete reads a fast run's status from its task: the finished one
// goes, the running one stays.
func TestRunDeleteFinishedTakesFinishedFastRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	runs, w, byRun := claimedRuns(t, b, single(2))
	done, live := runs[0].ID, runs[1].ID
	complete(t, b.st, w, store.StatusCompleted, byRun[done])
	status, _ := storedRun(t, b, done)
	require.Equal(t, "pending", status, "a fast run's row is not written")

	deleted, err := b.st.RunDeleteFinished(ctx, []int64{done, live})
	require.NoError(t, err)
	require.Equal(t, []int64{done}, deleted)
	_, err = b.st.RunGet(ctx, done)
	require.ErrorIs(t, err, store.ErrNotFound)
	run, err := b.st.RunGet(ctx, live)
	require.NoError(t, err)
	require.Equal(t, "running", run.Status)
}
