package maint_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/maint"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fakeNow is the time of the tests' injected clock.
var fakeNow = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

type bundle struct {
	db     *pgtest.DB
	st     *store.Store
	health *backoff.Health
}

func setup(t *testing.T) bundle {
	t.Helper()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(context.Background(), []string{"default"}))
	return bundle{db: db, st: st, health: backoff.NewHealth(slog.New(slog.DiscardHandler), func() time.Time { return fakeNow })}
}

// exec runs a statement on the test database: the tests age rows, as
// only the database's clock decides expiry and retention.
func (b bundle) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	_, err := b.db.SQL.Exec(fmt.Sprintf(query, pgtest.Schema), args...)
	require.NoError(t, err)
}

// insertRuns inserts one single-task run per requeue flag and returns the
// task ids. Runs of one workflow share their task templates: the flag
// picks the workflow, "requeue" or "park".
func (b bundle) insertRuns(t *testing.T, requeue ...bool) []int64 {
	t.Helper()
	ctx := context.Background()
	ps := make([]store.RunInsertParams, len(requeue))
	for i, rq := range requeue {
		wf := "park"
		if rq {
			wf = "requeue"
		}
		ps[i] = store.RunInsertParams{Workflow: wf, Input: json.RawMessage(`{}`), Queue: "default",
			Tasks: []store.TaskTemplate{{Idx: 0, Name: "only", MaxAttempts: 3, MaxRescues: 3, RequeueOnInterrupt: rq,
				Deps: []int{}, Dependents: []int{}}}}
	}
	runs, err := b.st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	ids := make([]int64, len(runs))
	for i, r := range runs {
		tasks, err := b.st.TaskListByRun(ctx, r.ID)
		require.NoError(t, err)
		require.Len(t, tasks, 1)
		ids[i] = tasks[0].ID
	}
	return ids
}

func TestRescuerRunOnceRescuesExpiredLeasesAndMarksWorkerLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	dead, err := b.st.WorkerInsert(ctx, "dead", map[string]int{"default": 4})
	require.NoError(t, err)
	alive, err := b.st.WorkerInsert(ctx, "alive", map[string]int{"default": 4})
	require.NoError(t, err)
	ids := b.insertRuns(t, true, false, true)
	claimed, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: dead, Queues: []string{"default"}, Limits: []int{2}, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	claimed, err = b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: alive, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, ids[2], claimed[0].ID)
	// The dead worker stopped heartbeating a minute ago: its leases ran out.
	b.exec(t, `UPDATE %s.tasks SET lease_expires_at = now() - interval '1 second' WHERE worker_id = $1`, dead)
	b.exec(t, `UPDATE %s.workers SET heartbeat_at = now() - interval '1 minute' WHERE id = $1`, dead)

	var moves atomic.Int64
	r := maint.NewRescuer(maint.RescuerConfig{Store: b.st, Interval: time.Hour, Lease: 30 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Health: b.health,
		OnMoves: func(ms ...[]store.Moved) {
			for _, m := range ms {
				moves.Add(int64(len(m)))
			}
		}})
	require.NoError(t, r.RunOnce(ctx))

	want := map[int64]string{ids[0]: store.StatusReady, ids[1]: store.StatusInterrupted, ids[2]: store.StatusRunning}
	for id, status := range want {
		tk, err := b.st.TaskGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, status, tk.Status, "task %d", id)
	}
	require.Equal(t, int64(2), moves.Load(), "both rescues reach the metrics hook")
	workers, err := b.st.WorkerList(ctx, 10)
	require.NoError(t, err)
	status := map[int64]string{}
	for _, w := range workers {
		status[w.ID] = w.Status
	}
	require.Equal(t, "lost", status[dead])
	require.Equal(t, "running", status[alive])

	// A second pass finds nothing more to do.
	require.NoError(t, r.RunOnce(ctx))
	require.Equal(t, int64(2), moves.Load())
}

// deadWorkerTasks inserts one-task runs (their requeue_on_interrupt as
// given), claims them all with an hour's lease as a worker that then
// dies, and returns their task ids, a rescuer over the store on clock,
// and a reader of a task's status.
func (b bundle) deadWorkerTasks(t *testing.T, clock func() time.Time, requeue ...bool) ([]int64, *maint.Rescuer, func(id int64) string) {
	t.Helper()
	ctx := context.Background()
	dead, err := b.st.WorkerInsert(ctx, "dead", map[string]int{"default": 4})
	require.NoError(t, err)
	ids := b.insertRuns(t, requeue...)
	claimed, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: dead, Queues: []string{"default"}, Limits: []int{len(ids)}, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, claimed, len(ids))
	r := maint.NewRescuer(maint.RescuerConfig{Store: b.st, Interval: time.Hour, Lease: 30 * time.Second,
		Clock: clock, Logger: slog.New(slog.DiscardHandler), Health: b.health, OnMoves: func(...[]store.Moved) {}})
	status := func(id int64) string {
		tk, err := b.st.TaskGet(ctx, id)
		require.NoError(t, err)
		return tk.Status
	}
	return ids, r, status
}

// A pass looks at the leases that expired since the previous one (with
// an overlap): a lease that expired just now is rescued at once, one that
// expired an hour ago, though never seen by a pass, only by the next
// full pass, which comes every rescueFullEvery (12) passes.
func TestRescuerLooksBackSinceItsLastPassAndFullyEveryTwelfth(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := fakeNow
	ids, r, status := b.deadWorkerTasks(t, func() time.Time { return now }, true, true)
	require.NoError(t, r.RunOnce(ctx)) // the first pass, a full one: nothing expired yet
	b.exec(t, `UPDATE %s.tasks SET lease_expires_at = now() - interval '1 hour' WHERE id = $1`, ids[0])
	b.exec(t, `UPDATE %s.tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, ids[1])
	for pass := 2; pass <= 12; pass++ {
		now = now.Add(5 * time.Second)
		require.NoError(t, r.RunOnce(ctx))
		require.Equal(t, store.StatusReady, status(ids[1]), "pass %d: expired a second ago", pass)
		require.Equal(t, store.StatusRunning, status(ids[0]), "pass %d: expired an hour ago, before the window", pass)
	}
	now = now.Add(5 * time.Second)
	require.NoError(t, r.RunOnce(ctx)) // the 13th: full
	require.Equal(t, store.StatusReady, status(ids[0]), "the full pass finds the old lease")
}

// A windowed pass looks back to the database's clock as the previous
// pass read it, less rescueOverlap (a second), whatever the process's
// clock says: a lease that expired after that is rescued, one written
// expired two seconds before it is left to the next full pass.
func TestRescuerWindowStartsAtThePreviousPassByTheDatabaseClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// The process's clock stands still: the window comes from the database's.
	ids, r, status := b.deadWorkerTasks(t, func() time.Time { return fakeNow }, true, true)
	var before time.Time
	require.NoError(t, b.db.SQL.QueryRow(`SELECT now()`).Scan(&before))
	require.NoError(t, r.RunOnce(ctx)) // the first pass, a full one, reads the clock after before
	b.exec(t, `UPDATE %s.tasks SET lease_expires_at = $2 WHERE id = $1`, ids[0], before.Add(-2*time.Second))
	b.exec(t, `UPDATE %s.tasks SET lease_expires_at = $2 WHERE id = $1`, ids[1], before)
	require.NoError(t, r.RunOnce(ctx))
	require.Equal(t, store.StatusReady, status(ids[1]), "expired after the previous pass's clock, less a second")
	require.Equal(t, store.StatusRunning, status(ids[0]), "written expired 2 s before the previous pass: the full pass's")
}

// A full pass that took long (one under a held snapshot walks every
// lease entry since the hold began) puts off the next: it waits for
// rescueFullSpacing (40) times as long, however many passes come first.
func TestRescuerSpacesOutSlowFullPasses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// The clock moves by tick at each reading: a pass reads it when it
	// begins and, if full, when it ends.
	const tickFirst = 10 * time.Second
	now, tick := fakeNow, tickFirst
	ids, r, status := b.deadWorkerTasks(t, func() time.Time { now = now.Add(tick); return now }, true)
	require.NoError(t, r.RunOnce(ctx)) // the first pass, a full one, took 10 s: the next full one is 400 s after its start
	tick = 0
	b.exec(t, `UPDATE %s.tasks SET lease_expires_at = now() - interval '1 hour' WHERE id = $1`, ids[0])
	fullBegan := fakeNow.Add(tickFirst)
	for pass := 2; now.Sub(fullBegan) < 400*time.Second; pass++ {
		require.NoError(t, r.RunOnce(ctx))
		require.Equal(t, store.StatusRunning, status(ids[0]), "pass %d, %s after the full one began: not full yet", pass, now.Sub(fullBegan))
		now = now.Add(5 * time.Second)
	}
	require.NoError(t, r.RunOnce(ctx))
	require.Equal(t, store.StatusReady, status(ids[0]), "the full pass, 400 s after the last one began, finds the old lease")
}

func TestPrunerRunOnceDeletesOldFinishedRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.insertRuns(t, false, false, false)
	runOf := map[int64]int64{}
	for _, id := range ids {
		tk, err := b.st.TaskGet(ctx, id)
		require.NoError(t, err)
		runOf[id] = tk.RunID
	}
	// Two runs finished, one of them 40 days ago; the third still runs.
	b.exec(t, `UPDATE %s.run_rows SET status = 'completed', created_at = now() - interval '41 days', finished_at = now() - interval '40 days' WHERE id = $1`, runOf[ids[0]])
	b.exec(t, `UPDATE %s.run_rows SET status = 'completed', finished_at = now() - interval '1 day' WHERE id = $1`, runOf[ids[1]])

	off := maint.NewPruner(maint.PrunerConfig{Store: b.st, Retention: -1, Logger: slog.New(slog.DiscardHandler), Health: b.health})
	require.NoError(t, off.RunOnce(ctx))
	_, err := b.st.RunGet(ctx, runOf[ids[0]])
	require.NoError(t, err, "a negative retention keeps every run")

	p := maint.NewPruner(maint.PrunerConfig{Store: b.st, Retention: 30 * 24 * time.Hour, Logger: slog.New(slog.DiscardHandler), Health: b.health})
	require.NoError(t, p.RunOnce(ctx))
	_, err = b.st.RunGet(ctx, runOf[ids[0]])
	require.ErrorIs(t, err, store.ErrNotFound, "the run finished 40 days ago is pruned")
	_, err = b.st.TaskGet(ctx, ids[0])
	require.ErrorIs(t, err, store.ErrNotFound, "with its tasks")
	for _, id := range ids[1:] {
		_, err = b.st.RunGet(ctx, runOf[id])
		require.NoError(t, err, "recent and live runs stay")
	}
}

func TestCountFolderRunOnceFoldsDeltas(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.insertRuns(t, false, false)
	deltas := func() int {
		var n int
		require.NoError(t, b.db.SQL.QueryRow(fmt.Sprintf(`SELECT count(*) FROM %s.task_count_deltas`, pgtest.Schema)).Scan(&n))
		return n
	}
	require.Positive(t, deltas(), "the insert wrote deltas")
	before, err := b.st.TaskCountsByState(ctx)
	require.NoError(t, err)

	require.NoError(t, maint.NewCountFolder(b.st, b.health).RunOnce(ctx))
	require.Zero(t, deltas(), "every delta is folded")
	after, err := b.st.TaskCountsByState(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "folding does not change the counts")
	require.Equal(t, []store.TaskCount{{Workflow: "park", Queue: "default", Status: store.StatusReady, Tasks: 2}}, after)
}

func TestServiceRetriesFailuresAndStops(t *testing.T) {
	t.Parallel()
	health := backoff.NewHealth(slog.New(slog.DiscardHandler), func() time.Time { return fakeNow })
	var calls atomic.Int64
	recovered := make(chan struct{})
	s := maint.NewService("flaky", time.Hour, health, func(ctx context.Context) error {
		switch calls.Add(1) {
		case 1, 2:
			return errors.New("boom")
		case 3:
			close(recovered)
		}
		return nil
	})
	s.Stop() // before Start: a no-op
	require.NoError(t, s.Start(context.Background()))
	require.Error(t, s.Start(context.Background()), "a service starts once")
	select {
	case <-recovered:
	case <-time.After(30 * time.Second):
		t.Fatal("a failed run must be retried after a backoff, not after the hour-long interval")
	}
	require.Equal(t, int64(2), health.FailedTries("flaky"))
	s.Stop()
	s.Stop()
	require.Equal(t, int64(3), calls.Load(), "stopped: no run after the third")
}

func TestServiceKeepsThePaceItIsGiven(t *testing.T) {
	t.Parallel()
	health := backoff.NewHealth(slog.New(slog.DiscardHandler), func() time.Time { return fakeNow })
	var calls atomic.Int64
	fifth := make(chan struct{})
	s := maint.NewService("paced", time.Hour, health, func(ctx context.Context) error {
		if calls.Add(1) == 5 {
			close(fifth)
		}
		return nil
	})
	s.Pace(func() time.Duration { return time.Millisecond })
	require.NoError(t, s.Start(context.Background()))
	defer s.Stop()
	select {
	case <-fifth:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d runs: the pace (1 ms) must replace the hour-long interval", calls.Load())
	}
}

func TestRescuerSendsTasksInADurableWaitBackToReady(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	dead, err := b.st.WorkerInsert(ctx, "dead", map[string]int{"default": 4})
	require.NoError(t, err)
	// Neither requeues on interrupt; one is parked in a durable wait, the
	// other in a plain deferral, and the dead worker's leases ran out.
	ids := b.insertRuns(t, false, false)
	claimed, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: dead, Queues: []string{"default"}, Limits: []int{2}, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	until := time.Now().Add(time.Hour)
	park := store.TransitionItem{TaskID: ids[0], To: store.StatusDeferred}
	park.SetWait(&store.Wait{Kind: store.WaitKindSleep, Until: &until, Since: time.Now()})
	// The plain deferral stores its condition's interval, not a wait kind.
	plainPark := store.TransitionItem{TaskID: ids[1], To: store.StatusDeferred}
	plainPark.SetCondition(time.Second, time.Now())
	moved, err := b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: dead,
		Items: []store.TransitionItem{park, plainPark}})
	require.NoError(t, err)
	require.Len(t, moved, 2)
	tk, err := b.st.TaskGet(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, store.WaitKindSleep, *tk.WaitKind, "the park stored the wait")
	b.exec(t, `UPDATE %s.tasks SET lease_expires_at = now() - interval '1 second' WHERE worker_id = $1`, dead)

	r := maint.NewRescuer(maint.RescuerConfig{Store: b.st, Interval: time.Hour, Lease: 30 * time.Second,
		Logger: slog.New(slog.DiscardHandler), Health: b.health, OnMoves: func(...[]store.Moved) {}})
	require.NoError(t, r.RunOnce(ctx))

	waiting, err := b.st.TaskGet(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, store.StatusReady, waiting.Status, "no handler code was in flight: back to ready")
	require.Zero(t, waiting.Rescues, "a durable wait's rescue does not count against max_rescues")
	require.Nil(t, waiting.WaitKind, "the wait is cleared with the move")
	plain, err := b.st.TaskGet(ctx, ids[1])
	require.NoError(t, err)
	require.Equal(t, store.StatusInterrupted, plain.Status, "a plain deferral keeps the interrupt rule")
	require.Equal(t, 1, plain.Rescues)
	require.Nil(t, plain.WaitEveryMs, "the interval is cleared with the move")
}

func TestPrunerDeletesStepsAndSignalsWithTheirRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.insertRuns(t, false, false)
	for _, id := range ids {
		b.exec(t, `INSERT INTO %s.task_steps (task_id, name, result, attempt) VALUES ($1, 'a', '1', 1)`, id)
		b.exec(t, `INSERT INTO %s.task_signals (task_id, name, payload) VALUES ($1, 'go', '{}')`, id)
	}
	b.exec(t, `UPDATE %s.run_rows SET status = 'completed', created_at = now() - interval '41 days', finished_at = now() - interval '40 days'
		WHERE id = (SELECT run_id FROM %[1]s.tasks WHERE id = $1)`, ids[0])
	require.NoError(t, maint.NewPruner(maint.PrunerConfig{Store: b.st, Retention: 30 * 24 * time.Hour,
		Logger: slog.New(slog.DiscardHandler), Health: b.health}).RunOnce(ctx))
	count := func(table string, id int64) int {
		var n int
		require.NoError(t, b.db.SQL.QueryRow(fmt.Sprintf(`SELECT count(*) FROM %s.%s WHERE task_id = $1`, pgtest.Schema, table), id).Scan(&n))
		return n
	}
	for _, table := range []string{"task_steps", "task_signals"} {
		require.Zero(t, count(table, ids[0]), "%s of the pruned run", table)
		require.Equal(t, 1, count(table, ids[1]), "%s of the live run", table)
	}
}

// The pruner deletes flow keys that no task refers to and that have been
// idle for the retention, once per FlowKeyPruneEvery across the cluster
// (its lease), and not at all when runs are kept for ever.
func TestPrunerDeletesIdleFlowKeysOnceInAWhile(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	keyed := func(v string) store.RunInsertParams {
		return store.RunInsertParams{Workflow: "keyed", Input: json.RawMessage(`{"t": "` + v + `"}`), Queue: "default",
			Tasks: []store.TaskTemplate{{Idx: 0, Name: "only", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{},
				Concurrency: &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 1}}}}
	}
	keys := func() []string {
		var ks []string
		require.NoError(t, b.db.SQL.QueryRow(fmt.Sprintf(`SELECT coalesce(array_agg(split_part(key, chr(31), 3) ORDER BY key), '{}') FROM %s.flow_keys`,
			pgtest.Schema)).Scan(pq.Array(&ks)))
		return ks
	}
	_, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{keyed("old"), keyed("recent"), keyed("later")})
	require.NoError(t, err)
	// No task refers to any of them; "old" and "later" were last used 40
	// days ago, "recent" 10 days ago (the retention is 30 days).
	b.exec(t, `DELETE FROM %s.run_rows`)
	b.exec(t, `UPDATE %s.flow_keys SET updated_at = now() - interval '40 days' WHERE key LIKE '%%old' OR key LIKE '%%later'`)
	b.exec(t, `UPDATE %s.flow_keys SET updated_at = now() - interval '10 days' WHERE key LIKE '%%recent'`)
	log := slog.New(slog.DiscardHandler)
	pruner := func(retention time.Duration, now time.Time) *maint.Pruner {
		return maint.NewPruner(maint.PrunerConfig{Store: b.st, Retention: retention, Clock: func() time.Time { return now },
			Logger: log, Health: b.health})
	}

	require.NoError(t, pruner(-1, fakeNow).RunOnce(ctx))
	require.Equal(t, []string{"later", "old", "recent"}, keys(), "a negative retention keeps every key")

	// The first pass takes the lease and prunes "old" ("later" is marked
	// used just before it); passes in the next six hours prune nothing,
	// though "later" is idle again.
	b.exec(t, `UPDATE %s.flow_keys SET updated_at = now() WHERE key LIKE '%%later'`)
	require.NoError(t, pruner(30*24*time.Hour, fakeNow).RunOnce(ctx))
	require.Equal(t, []string{"later", "recent"}, keys())
	b.exec(t, `UPDATE %s.flow_keys SET updated_at = now() - interval '40 days' WHERE key LIKE '%%later'`)
	require.NoError(t, pruner(30*24*time.Hour, fakeNow.Add(maint.FlowKeyPruneEvery-time.Minute)).RunOnce(ctx))
	require.Equal(t, []string{"later", "recent"}, keys(), "within six hours of the last prune, none")
	require.NoError(t, pruner(30*24*time.Hour, fakeNow.Add(maint.FlowKeyPruneEvery+time.Minute)).RunOnce(ctx))
	require.Equal(t, []string{"recent"}, keys(), "after six hours, the next")
}
