package store_test

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// Tests of the single-statement transition (dependents released in SQL,
// run status folded in), prepared statements and pruning.

func claimAll(t *testing.T, st *store.Store, worker int64, n int) []store.Claimed {
	t.Helper()
	got, err := st.TaskClaim(context.Background(), store.ClaimParams{WorkerID: worker, Queues: []string{"default"}, Limits: []int{n}, Lease: time.Minute})
	require.NoError(t, err)
	return got
}

func complete(t *testing.T, st *store.Store, worker int64, to string, cs ...store.Claimed) []store.Moved {
	t.Helper()
	items := make([]store.TransitionItem, len(cs))
	for i, c := range cs {
		items[i] = store.TransitionItem{TaskID: c.ID, To: to, Attempt: c.Attempt}
	}
	moved, err := st.Transition(context.Background(), store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: worker, Items: items})
	require.NoError(t, err)
	return moved
}

func statuses(t *testing.T, st *store.Store, runID int64) map[string]string {
	t.Helper()
	ts, err := st.TaskListByRun(context.Background(), runID)
	require.NoError(t, err)
	out := map[string]string{}
	for _, task := range ts {
		out[task.Name] = task.Status
	}
	return out
}

func TestTransitionReleasesDependentsInOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{diamond()})
	require.NoError(t, err)
	run := res[0].ID
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)

	a := claimAll(t, b.st, w, 10)
	require.Len(t, a, 1)
	complete(t, b.st, w, store.StatusCompleted, a...)
	require.Equal(t, map[string]string{"a": "completed", "b": "ready", "c": "ready", "d": "not_started"}, statuses(t, b.st, run))

	bc := claimAll(t, b.st, w, 10)
	require.Len(t, bc, 2)
	complete(t, b.st, w, store.StatusCompleted, bc...) // both deps of d in one batch
	require.Equal(t, map[string]string{"a": "completed", "b": "completed", "c": "completed", "d": "ready"}, statuses(t, b.st, run))

	d := claimAll(t, b.st, w, 10)
	require.Len(t, d, 1)
	// b and c finished without output: nothing of theirs to merge.
	require.JSONEq(t, `[]`, string(d[0].DepOutputs))
	complete(t, b.st, w, store.StatusCompleted, d...)
	r, err := b.st.RunGet(ctx, run)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, r.Status)
	require.NotNil(t, r.FinishedAt)

	// One event per move, released moves included.
	evs, err := b.st.EventListByRun(ctx, run)
	require.NoError(t, err)
	perTask := map[int64][]string{}
	for _, e := range evs {
		from := ""
		if e.From != nil {
			from = *e.From
		}
		perTask[e.TaskID] = append(perTask[e.TaskID], from+">"+e.To)
	}
	for _, c := range append(bc, d...) {
		require.Equal(t, []string{"not_started>ready", "ready>running", "running>completed"}, perTask[c.ID])
	}
}

// A batch of several finished tasks reports each dependent it released
// once: the statement returns the released ids on its first row only,
// not on each of its rows.
func TestTransitionReportsEachReleasedDependentOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{diamond(), diamond(), diamond()})
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	roots := claimAll(t, b.st, w, 10)
	require.Len(t, roots, 3)
	items := make([]store.TransitionItem, len(roots))
	for i, c := range roots {
		items[i] = store.TransitionItem{TaskID: c.ID, To: store.StatusCompleted, Attempt: c.Attempt}
	}
	moved, released, err := b.st.TransitionAll(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: items})
	require.NoError(t, err)
	require.Len(t, moved, 3)
	want := map[int64]bool{}
	for _, r := range res {
		ts, err := b.st.TaskListByRun(ctx, r.ID)
		require.NoError(t, err)
		for _, task := range ts {
			if task.Name == "b" || task.Name == "c" {
				want[task.ID] = true
			}
		}
	}
	got := map[int64]int{}
	for _, m := range released {
		require.Equal(t, store.StatusNotStarted, m.From)
		require.Equal(t, store.StatusReady, m.To)
		got[m.TaskID]++
	}
	require.Len(t, got, len(want))
	for id := range want {
		require.Equal(t, 1, got[id], "task %d", id)
	}
}

func TestTransitionSkipsDependentsOfFailedTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{diamond()})
	require.NoError(t, err)
	run := res[0].ID
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	complete(t, b.st, w, store.StatusCompleted, claimAll(t, b.st, w, 10)...)
	bc := claimAll(t, b.st, w, 10)
	require.Len(t, bc, 2)
	// b fails and c completes in one batch: d must not be made ready in
	// SQL; the Go rule skips it.
	items := []store.TransitionItem{
		{TaskID: bc[0].ID, To: store.StatusFailed, Attempt: bc[0].Attempt},
		{TaskID: bc[1].ID, To: store.StatusCompleted, Attempt: bc[1].Attempt},
	}
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: items})
	require.NoError(t, err)
	require.Equal(t, "skipped", statuses(t, b.st, run)["d"])
	r, err := b.st.RunGet(ctx, run)
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, r.Status)
}

// A custom rule is decided by package rule, after the statement: b's
// rule refuses (none of a succeeded) and b is skipped; c, with the
// default rule, is released in SQL.
func TestCustomRuleIsDecidedByRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	p := diamond()
	p.Tasks[1].TriggerRule = json.RawMessage(`{"mode":"none","conditions":[{"kind":"succeeded","task":"a"}]}`)
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{p})
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	a := claimAll(t, b.st, w, 10)
	require.Len(t, a, 1)
	_, released, err := b.st.TransitionAll(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: a[0].ID, To: store.StatusCompleted, Attempt: a[0].Attempt}}})
	require.NoError(t, err)
	require.Len(t, released, 2)
	st := statuses(t, b.st, res[0].ID)
	require.Equal(t, "skipped", st["b"])
	require.Equal(t, "ready", st["c"])
}

func TestPreparedStatementsJoinCallerTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(3))
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)

	tx, err := b.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	in := b.st.WithTx(tx)
	got := claimAll(t, in, w, 10)
	require.Len(t, got, 3)
	complete(t, in, w, store.StatusCompleted, got...)
	_, err = in.RunInsertMany(ctx, single(2))
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())

	// Nothing of it stayed.
	again := claimAll(t, b.st, w, 10)
	require.Len(t, again, 3)
}

func TestRunPruneDeletesEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	res, err := b.st.RunInsertMany(ctx, single(2))
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	got := claimAll(t, b.st, w, 2) // both runs have events; one finishes
	complete(t, b.st, w, store.StatusCompleted, got[0])
	done := got[0].RunID
	other := res[0].ID
	if other == done {
		other = res[1].ID
	}
	n, err := b.st.RunPrune(ctx, -time.Minute, 100) // finished before a minute from now: the finished run

	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	evs, err := b.st.EventListByRun(ctx, done)
	require.NoError(t, err)
	require.Empty(t, evs)
	evs, err = b.st.EventListByRun(ctx, other)
	require.NoError(t, err)
	require.NotEmpty(t, evs)
}

// RunPrune goes through old runs batch after batch, each starting after
// the last run of the one before: runs created in one statement share
// their created_at, so the id breaks the tie, and a run passed over (not
// finished) does not stop the ones after it.
func TestRunPruneBatchesResumeAfterTheLastRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	res, err := b.st.RunInsertMany(ctx, single(7)) // one created_at for all
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	got := claimAll(t, b.st, w, 7)
	require.Len(t, got, 7)
	sort.Slice(got, func(i, j int) bool { return got[i].RunID < got[j].RunID })
	running := got[3].RunID // the middle run stays unfinished
	complete(t, b.st, w, store.StatusCompleted, append(append([]store.Claimed{}, got[:3]...), got[4:]...)...)

	n, err := b.st.RunPrune(ctx, -time.Minute, 2)
	require.NoError(t, err)
	require.EqualValues(t, 6, n, "every finished run, two at a time")
	for _, r := range res {
		_, err := b.st.RunGet(ctx, r.ID)
		if r.ID == running {
			require.NoError(t, err, "the unfinished run is kept")
		} else {
			require.ErrorIs(t, err, store.ErrNotFound, "run %d", r.ID)
		}
	}
	n, err = b.st.RunPrune(ctx, -time.Minute, 2)
	require.NoError(t, err)
	require.Zero(t, n)
}

// Two transactions that each finish the last open task of one run, and
// commit in turn, must leave the run finished: a run status derived from
// each statement's snapshot would see the other task still running.
func TestConcurrentLastTasksFinishTheRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pair := store.RunInsertParams{Workflow: "pair", Input: json.RawMessage(`{}`), Queue: "default",
		Tasks: []store.TaskTemplate{
			{Idx: 0, Name: "a", MaxAttempts: 1, MaxRescues: 3, Deps: []int{}, Dependents: []int{}},
			{Idx: 1, Name: "b", MaxAttempts: 1, MaxRescues: 3, Deps: []int{}, Dependents: []int{}},
		}}
	ids, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{pair})
	require.NoError(t, err)
	worker, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 2})
	require.NoError(t, err)
	cs := claimAll(t, b.st, worker, 2)
	require.Len(t, cs, 2)

	finish := func(tx *store.Store, c store.Claimed) {
		t.Helper()
		moved, err := tx.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: worker,
			Items: []store.TransitionItem{{TaskID: c.ID, To: store.StatusCompleted, Attempt: c.Attempt}}})
		require.NoError(t, err)
		require.Len(t, moved, 1)
	}
	tx1, err := b.db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	finish(b.st.WithTx(tx1), cs[0])
	// The second transaction runs while the first is open; it may wait on
	// the first's locks, so it runs in a goroutine.
	done := make(chan error, 1)
	go func() {
		tx2, err := b.db.SQL.BeginTx(ctx, nil)
		if err != nil {
			done <- err
			return
		}
		finish(b.st.WithTx(tx2), cs[1])
		done <- tx2.Commit()
	}()
	// Give the second statement a chance to take its snapshot before the
	// first commits: wait until it is seen waiting or has committed.
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
		}
		var waiting int
		require.NoError(t, b.db.SQL.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
		return waiting > 0
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, tx1.Commit())
	require.NoError(t, <-done)

	run, err := b.st.RunGet(ctx, ids[0].ID)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, run.Status)
}

// A worker's batch whose items say which state each row is in is written
// without reading the rows ahead; it is still compare-and-set: an item
// whose row is not in the state it names, or is no longer this worker's,
// does not move.
func TestKnownStateBatchIsCompareAndSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(3))
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	got := claimAll(t, b.st, w, 3)
	require.Len(t, got, 3)
	// The third task is cancelled behind the worker's back.
	_, err = b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning},
		Items: []store.TransitionItem{{TaskID: got[2].ID, To: store.StatusCancelled}}})
	require.NoError(t, err)

	moved, err := b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning, store.StatusDeferred}, WorkerID: w,
		Items: []store.TransitionItem{
			{TaskID: got[0].ID, To: store.StatusCompleted, From: store.StatusRunning, Attempt: 1},
			{TaskID: got[1].ID, To: store.StatusCompleted, From: store.StatusDeferred, Attempt: 1}, // wrong state
			{TaskID: got[2].ID, To: store.StatusCompleted, From: store.StatusRunning, Attempt: 1},  // cancelled
		}})
	require.NoError(t, err)
	require.Len(t, moved, 1)
	require.Equal(t, got[0].ID, moved[0].TaskID)
	require.Equal(t, store.StatusRunning, moved[0].From)
	require.Equal(t, w, *moved[0].WorkerID)
	for i, want := range []string{store.StatusCompleted, store.StatusRunning, store.StatusCancelled} {
		task, err := b.st.TaskGet(ctx, got[i].ID)
		require.NoError(t, err)
		require.Equal(t, want, task.Status, "task %d", i)
	}
	evs, err := b.st.EventListByTask(ctx, got[0].ID)
	require.NoError(t, err)
	require.Len(t, evs, 2)
	require.Equal(t, store.StatusRunning, *evs[1].From)
	require.Equal(t, w, *evs[1].WorkerID)
}

// Nothing on runs indexes a column that a transition changes, so a run's
// status updates can be HOT (no index entries); task_events carries no
// B-tree (only the partitions whose day is over get one by task, see
// HistoryPartitionIndex). A new index on these columns must weigh that
// cost.
func TestHotPathIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rows, err := b.db.SQL.Query(`
SELECT i.indexrelid::regclass::text, c.relname, coalesce(pg_get_expr(i.indpred, i.indrelid), ''), array_to_string(array(
	SELECT a.attname FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)), ',')
FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
WHERE n.nspname = $1 AND c.relname IN ('run_rows', 'task_events') AND am.amname = 'btree'`, pgtest.Schema)
	require.NoError(t, err)
	defer rows.Close()
	changing := []string{"status", "done_tasks", "failed_tasks", "cancelled_tasks", "interrupted_tasks", "started_at", "finished_at", "updated_at"}
	events := 0
	for rows.Next() {
		var name, table, pred, cols string
		require.NoError(t, rows.Scan(&name, &table, &pred, &cols))
		if table == "task_events" {
			events++
			continue
		}
		for _, c := range changing {
			require.NotContains(t, strings.Split(cols, ","), c, "index %s keys runs.%s", name, c)
			require.NotContains(t, pred, c, "index %s's predicate reads runs.%s", name, c)
		}
	}
	require.NoError(t, rows.Err())
	require.Zero(t, events, "B-tree indexes on task_events")
}

// Finishing leaf tasks and claiming the next in one statement: a run
// with a task finishing and another starting in the same statement gets
// both counted in its one row update, every move has its event, and a
// task that has dependents is not written by this path.
func TestFinishAndClaimOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	pair := store.RunInsertParams{Workflow: "pair", Input: json.RawMessage(`{"k":"v"}`), Queue: "default",
		Tasks: []store.TaskTemplate{
			{Idx: 0, Name: "a", MaxAttempts: 1, MaxRescues: 3, Deps: []int{}, Dependents: []int{}},
			{Idx: 1, Name: "b", MaxAttempts: 1, MaxRescues: 3, Deps: []int{}, Dependents: []int{}},
		}}
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{pair, diamond()})
	require.NoError(t, err)
	run := res[0].ID
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	first := claimAll(t, b.st, w, 1)
	require.Len(t, first, 1)
	require.Equal(t, run, first[0].RunID)

	finish := func(c store.Claimed, limit int) ([]store.Moved, []store.Claimed) {
		p := store.TransitionParams{From: []string{store.StatusRunning, store.StatusDeferred}, WorkerID: w,
			Items: []store.TransitionItem{{TaskID: c.ID, To: store.StatusCompleted, From: store.StatusRunning, Attempt: c.Attempt,
				Output: json.RawMessage(`{"done":true}`)}}}
		require.True(t, store.FinishClaimable(p))
		moved, claimed, err := b.st.TaskFinishAndClaimOne(ctx, p, store.ClaimParams{WorkerID: w, Queues: []string{"default"},
			Limits: []int{limit}, Lease: time.Minute})
		require.NoError(t, err)
		return moved, claimed
	}
	moved, claimed := finish(first[0], 1)
	require.Len(t, moved, 1)
	require.Equal(t, store.Moved{TaskID: first[0].ID, RunID: run, Queue: "default", From: store.StatusRunning,
		To: store.StatusCompleted, Attempt: 1, WorkerID: &w}, moved[0])
	require.Len(t, claimed, 1)
	second := claimed[0]
	require.Equal(t, run, second.RunID, "the other task of the same run")
	require.Equal(t, "b", second.Name)
	require.JSONEq(t, `{"k":"v"}`, string(second.RunInput))
	require.Equal(t, store.StatusRunning, second.Status)
	r, err := b.st.RunGet(ctx, run)
	require.NoError(t, err)
	require.Equal(t, store.RunRunning, r.Status)
	require.Equal(t, 1, r.DoneTasks, "one update of the run counted the finish and the start")

	moved, claimed = finish(second, 1) // claims the diamond's root
	require.Len(t, moved, 1)
	require.Len(t, claimed, 1)
	require.Equal(t, "a", claimed[0].Name)
	r, err = b.st.RunGet(ctx, run)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, r.Status)
	require.NotNil(t, r.FinishedAt)
	evs, err := b.st.EventListByRun(ctx, run)
	require.NoError(t, err)
	require.Len(t, evs, 4, "claim and finish of each task")

	// The diamond's root has dependents: this path leaves it running.
	moved, claimed = finish(claimed[0], 0)
	require.Empty(t, moved)
	require.Empty(t, claimed)
	root, err := b.st.TaskGet(ctx, claimed0ID(t, b.st, res[1].ID))
	require.NoError(t, err)
	require.Equal(t, store.StatusRunning, root.Status)

	// Items that do not name their state, or stay held, are refused.
	require.False(t, store.FinishClaimable(store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: 1, To: store.StatusCompleted}}}))
	require.False(t, store.FinishClaimable(store.TransitionParams{From: []string{store.StatusDeferred}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: 1, To: store.StatusRunning, From: store.StatusDeferred}}}))
}

func claimed0ID(t *testing.T, st *store.Store, runID int64) int64 {
	t.Helper()
	ts, err := st.TaskListByRun(context.Background(), runID)
	require.NoError(t, err)
	return ts[0].ID
}

// TestParkAndClaimOneStatement: one statement parks a worker's tasks
// (with dependents, and their durable wait) and claims no more tasks than
// it parked, however many the caller asks for: a park that lost its row
// keeps its slot with its handler.
func TestParkAndClaimOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	one := store.RunInsertParams{Workflow: "one", Input: json.RawMessage(`{}`), Queue: "default",
		Tasks: []store.TaskTemplate{{Idx: 0, Name: "x", MaxAttempts: 1, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{diamond(), one, one, one})
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	first := claimAll(t, b.st, w, 2) // the diamond's root and one single task
	require.Len(t, first, 2)
	root, lost := first[0], first[1]
	require.Equal(t, res[0].ID, root.RunID)
	require.NotEmpty(t, root.Dependents, "the root has dependents; parking releases nothing")

	until := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	park := store.TransitionItem{TaskID: root.ID, From: store.StatusRunning, To: store.StatusDeferred, Attempt: root.Attempt}
	park.SetWait(&store.Wait{Kind: store.WaitKindSleep, Until: &until, Since: time.Now()})
	p := store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: []store.TransitionItem{park,
		// Not this attempt's row any more: not parked, and claims nothing.
		{TaskID: lost.ID, From: store.StatusRunning, To: store.StatusDeferred, Attempt: lost.Attempt + 1}}}
	require.True(t, store.ParkClaimable(p))
	moved, claimed, err := b.st.TaskParkAndClaimOne(ctx, p, store.ClaimParams{WorkerID: w, Queues: []string{"default"},
		Limits: []int{2}, Lease: time.Minute})
	require.NoError(t, err)
	require.Equal(t, []store.Moved{{TaskID: root.ID, RunID: root.RunID, Queue: "default", From: store.StatusRunning,
		To: store.StatusDeferred, Attempt: 1, WorkerID: &w}}, moved)
	require.Len(t, claimed, 1, "one task claimed for the one task parked, though two were asked")
	require.Equal(t, store.StatusRunning, claimed[0].Status)

	got, err := b.st.TaskGet(ctx, root.ID)
	require.NoError(t, err)
	require.Equal(t, store.StatusDeferred, got.Status)
	require.Equal(t, w, *got.WorkerID, "a deferred task stays with its worker")
	require.NotNil(t, got.WaitUntil)
	require.True(t, until.Equal(*got.WaitUntil), "the durable wait is stored")
	other, err := b.st.TaskGet(ctx, lost.ID)
	require.NoError(t, err)
	require.Equal(t, store.StatusRunning, other.Status, "the stale item moved nothing")
	evs, err := b.st.EventListByRun(ctx, root.RunID)
	require.NoError(t, err)
	require.Equal(t, store.StatusDeferred, evs[len(evs)-1].To, "the park is in the log")
	var running int
	require.NoError(t, b.db.SQL.QueryRowContext(ctx, `SELECT count(*) FROM `+pgtest.Schema+`.tasks WHERE status = 'running' AND worker_id = $1`, w).Scan(&running))
	require.Equal(t, 2, running, "the lost task and the claimed one: never more than before the park")

	require.False(t, store.ParkClaimable(store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: 1, To: store.StatusDeferred}}}), "items must name their state")
	require.False(t, store.ParkClaimable(store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: 1, From: store.StatusRunning, To: store.StatusCompleted}}}), "parks only")
}

// A claim given ClaimParams.Buf reads its rows into that array, by each
// path a claim takes (alone, in one statement with a finish, in a
// finish's transaction), and into a larger one when they do not fit.
func TestClaimReadsIntoCallersArray(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(14))
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 20})
	require.NoError(t, err)
	buf := make([]store.Claimed, 0, 4)
	params := func(n int) store.ClaimParams {
		return store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{n}, Lease: time.Minute, Buf: buf}
	}
	seen := map[int64]bool{}
	check := func(got []store.Claimed, n int, inBuf bool) {
		t.Helper()
		require.Len(t, got, n)
		require.Equal(t, inBuf, &got[0] == &buf[:1][0], "read into the caller's array")
		for _, c := range got {
			require.NotZero(t, c.ID)
			require.False(t, seen[c.ID], "task %d claimed twice", c.ID)
			seen[c.ID] = true
			require.Equal(t, "only", c.Name)
			require.JSONEq(t, `{}`, string(c.RunInput))
		}
	}
	first, err := b.st.TaskClaim(ctx, params(3))
	require.NoError(t, err)
	check(first, 3, true)
	finish := func(c store.Claimed) store.TransitionParams {
		return store.TransitionParams{From: []string{store.StatusRunning, store.StatusDeferred}, WorkerID: w,
			Items: []store.TransitionItem{{TaskID: c.ID, To: store.StatusCompleted, From: store.StatusRunning, Attempt: c.Attempt}}}
	}
	p := finish(first[0])
	_, one, err := b.st.TaskFinishAndClaimOne(ctx, p, params(2))
	require.NoError(t, err)
	check(one, 2, true)
	_, _, inTx, err := b.st.TaskFinishAndClaim(ctx, finish(one[0]), params(4))
	require.NoError(t, err)
	check(inTx, 4, true)
	more, err := b.st.TaskClaim(ctx, params(5)) // more than buf holds
	require.NoError(t, err)
	check(more, 5, false)
	require.Len(t, seen, 14, "each claim took other tasks")
}
