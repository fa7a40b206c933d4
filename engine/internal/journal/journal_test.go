package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/journal"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The engine's error values, as the tests' own.
var (
	errInvalid  = errors.New("invalid input")
	errNotFound = errors.New("not found")
	errLost     = errors.New("task taken from this worker")
	errTimeout  = errors.New("durable wait timed out")
	errs        = journal.Errors{InvalidInput: errInvalid, NotFound: errNotFound, TaskLost: errLost, WaitTimeout: errTimeout}
)

// clock is the tests' injected clock: it moves only when told to.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time          { return c.now }
func (c *clock) Advance(d time.Duration) { c.now = c.now.Add(d) }
func newClock() *clock                   { return &clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

// runs are n single-task runs of workflow wf; children go to queue
// "kids", so that the parent's claims do not take them.
func runs(n int, wf string) []store.RunInsertParams {
	queue := "default"
	if wf == "child" {
		queue = "kids"
	}
	ps := make([]store.RunInsertParams, n)
	for i := range ps {
		ps[i] = store.RunInsertParams{Workflow: wf, Input: json.RawMessage(`{}`), Queue: queue,
			Tasks: []store.TaskTemplate{{Idx: 0, Name: "only", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}
	}
	return ps
}

// task is one task claimed by a worker, attempt after attempt.
type task struct {
	st     *store.Store
	worker int64
	id     int64
	run    int64
	clock  *clock
	held   store.StepHolder // the current attempt
}

// setup inserts one single-task run and claims its task (attempt 1).
func setup(t *testing.T) *task {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(ctx, []string{"default", "kids"}))
	rs, err := st.RunInsertMany(ctx, runs(1, "parent"))
	require.NoError(t, err)
	w, err := st.WorkerInsert(ctx, "w", map[string]int{"default": 1})
	require.NoError(t, err)
	tk := &task{st: st, worker: w, run: rs[0].ID, clock: newClock()}
	tk.claim(t)
	return tk
}

// claim claims the task (its next attempt).
func (tk *task) claim(t *testing.T) {
	t.Helper()
	c, err := tk.st.TaskClaim(context.Background(), store.ClaimParams{WorkerID: tk.worker, Queues: []string{"default"},
		Limits: []int{1}, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, c, 1)
	tk.id = c[0].ID
	tk.held = store.StepHolder{TaskID: c[0].ID, WorkerID: tk.worker, Attempt: c[0].Attempt}
}

// retry ends the current attempt (back to ready) and claims the next.
func (tk *task) retry(t *testing.T) {
	t.Helper()
	moved, err := tk.st.Transition(context.Background(), store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: tk.worker,
		Items: []store.TransitionItem{{TaskID: tk.id, To: store.StatusReady, Attempt: tk.held.Attempt}}})
	require.NoError(t, err)
	require.Len(t, moved, 1)
	tk.claim(t)
}

// journal is the current attempt's journal.
func (tk *task) journal() *journal.Journal {
	return journal.New(journal.Config{Errors: errs, Store: tk.st, Holder: tk.held, Clock: tk.clock.Now,
		Log: slog.New(slog.DiscardHandler), PollInterval: 100 * time.Millisecond})
}

func (tk *task) steps(t *testing.T) map[string]string {
	t.Helper()
	list, err := tk.st.TaskStepList(context.Background(), tk.id)
	require.NoError(t, err)
	out := map[string]string{}
	for _, s := range list {
		out[s.Name] = string(s.Result)
	}
	return out
}

func TestStepIsJournaledOnceAndReplayedByTheNextAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tk := setup(t)
	calls := 0
	fn := func(n int) func(context.Context) (int, error) {
		return func(context.Context) (int, error) { calls++; return n, nil }
	}
	first := tk.journal()
	v, err := journal.Step(ctx, first, "a", fn(1))
	require.NoError(t, err)
	require.Equal(t, 1, v)
	v, err = journal.Step(ctx, first, "a", fn(2))
	require.NoError(t, err)
	require.Equal(t, 1, v, "a second step of the name returns the first one's result")
	require.Equal(t, 1, calls)
	_, err = journal.Step(ctx, first, "b", func(context.Context) (int, error) { return 0, errors.New("boom") })
	require.EqualError(t, err, "boom", "a failed step's error is returned as it is")
	require.Equal(t, map[string]string{"a": "1"}, tk.steps(t), "a failed step journals nothing")

	tk.retry(t)
	second := tk.journal()
	v, err = journal.Step(ctx, second, "a", fn(3))
	require.NoError(t, err)
	require.Equal(t, 1, v, "the next attempt gets the journaled result")
	require.Equal(t, 1, calls, "without running the step again")

	// The stale attempt writes nothing.
	_, err = journal.Step(ctx, first, "c", fn(4))
	require.ErrorIs(t, err, errLost)
	require.EqualError(t, err, `journal step "c": task taken from this worker`)
	require.NotContains(t, tk.steps(t), "c")

	// A write of a name journaled already returns the journaled step:
	// the journal wins.
	st, err := second.Save(ctx, "a", json.RawMessage(`5`))
	require.NoError(t, err)
	require.Equal(t, 1, st.Attempt)
	require.JSONEq(t, `1`, string(st.Result))
}

func TestStepRefusesBadNamesAndResults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	j := setup(t).journal()
	never := func(context.Context) (int, error) { t.Fatal("ran"); return 0, nil }
	_, err := journal.Step(ctx, j, "", never)
	require.EqualError(t, err, "invalid input: step name is empty")
	_, err = journal.Step(ctx, j, string(make([]byte, journal.MaxNameBytes+1)), never)
	require.ErrorIs(t, err, errInvalid)
	_, err = journal.Step(ctx, j, "cairn:sleep#1", never)
	require.EqualError(t, err, `invalid input: step name "cairn:sleep#1": the prefix "cairn:" is reserved for the engine's waits`)
	_, err = journal.Step(ctx, j, "nul", func(context.Context) (string, error) { return "a\x00b", nil })
	require.ErrorIs(t, err, errInvalid)
	require.ErrorContains(t, err, `step "nul": encode result: invalid input: result`)
}

// park is a fake of the engine's park: it records what it was given and
// runs do.
type park struct {
	waits  []store.Wait
	everys []time.Duration
	do     func(ctx context.Context, check func(context.Context) (bool, time.Duration, error)) error
}

func (p *park) park(ctx context.Context, w *store.Wait, every time.Duration,
	check func(context.Context) (bool, time.Duration, error)) error {
	p.waits = append(p.waits, *w)
	p.everys = append(p.everys, every)
	return p.do(ctx, check)
}

var errStopped = errors.New("stopped")

func TestSleepKeepsTheFirstAttemptsWakeTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tk := setup(t)
	wake := tk.clock.Now().Add(time.Hour)
	p := &park{do: func(context.Context, func(context.Context) (bool, time.Duration, error)) error { return errStopped }}
	require.NoError(t, tk.journal().Sleep(ctx, 0, p.park), "no sleep, no park")
	err := tk.journal().Sleep(ctx, time.Hour, p.park)
	require.ErrorIs(t, err, errStopped)
	require.EqualError(t, err, "sleep: stopped")
	require.Len(t, p.waits, 1)
	require.Equal(t, store.WaitKindSleep, p.waits[0].Kind)
	require.True(t, wake.Equal(*p.waits[0].Until))
	require.Equal(t, time.Minute, p.everys[0], "a long sleep looks at the clock every minute")

	// The next attempt, half an hour later, sleeps until the same time.
	tk.retry(t)
	tk.clock.Advance(59*time.Minute + 59*time.Second)
	p.do = func(ctx context.Context, check func(context.Context) (bool, time.Duration, error)) error {
		done, next, err := check(ctx)
		require.NoError(t, err)
		require.False(t, done)
		require.Equal(t, time.Second, next)
		tk.clock.Advance(time.Second)
		done, _, err = check(ctx)
		require.NoError(t, err)
		require.True(t, done)
		return nil
	}
	require.NoError(t, tk.journal().Sleep(ctx, time.Hour, p.park))
	require.Len(t, p.waits, 2)
	require.True(t, wake.Equal(*p.waits[1].Until), "the journaled wake time")

	// Past the wake time, the sleep ends at once.
	tk.retry(t)
	require.NoError(t, tk.journal().Sleep(ctx, time.Hour, p.park))
	require.Len(t, p.waits, 2, "not parked")
	require.Contains(t, tk.steps(t), "cairn:sleep#1")
}

func TestAwaitSignalTakesEachSignalOnceAndTimesOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tk := setup(t)
	j := tk.journal()
	never := &park{do: func(context.Context, func(context.Context) (bool, time.Duration, error)) error {
		t.Fatal("parked")
		return nil
	}}

	// Sent before the wait: taken at once.
	_, err := tk.st.SignalSend(ctx, tk.id, "go", json.RawMessage(`{"n":1}`))
	require.NoError(t, err)
	got, err := j.AwaitSignal(ctx, "go", 0, never.park)
	require.NoError(t, err)
	require.JSONEq(t, `{"n":1}`, string(got))

	// Sent while parked: the check takes it.
	p := &park{do: func(ctx context.Context, check func(context.Context) (bool, time.Duration, error)) error {
		done, next, err := check(ctx)
		require.NoError(t, err)
		require.False(t, done)
		require.Equal(t, time.Second, next, "10 poll intervals")
		_, err = tk.st.SignalSend(ctx, tk.id, "go", json.RawMessage(`null`))
		require.NoError(t, err)
		done, _, err = check(ctx)
		require.NoError(t, err)
		require.True(t, done)
		return nil
	}}
	got, err = j.AwaitSignal(ctx, "go", 0, p.park)
	require.NoError(t, err)
	require.JSONEq(t, `null`, string(got))
	require.Equal(t, store.WaitKindSignal, p.waits[0].Kind)
	require.Equal(t, "go", p.waits[0].Name)
	require.Nil(t, p.waits[0].Until)

	// None comes: the deadline passes.
	p = &park{do: func(ctx context.Context, check func(context.Context) (bool, time.Duration, error)) error {
		_, next, err := check(ctx)
		require.NoError(t, err)
		require.Equal(t, 300*time.Millisecond, next, "the time left, under 10 poll intervals")
		tk.clock.Advance(300 * time.Millisecond)
		done, _, err := check(ctx)
		require.NoError(t, err)
		require.True(t, done)
		return nil
	}}
	_, err = j.AwaitSignal(ctx, "go", 300*time.Millisecond, p.park)
	require.ErrorIs(t, err, errTimeout)
	require.EqualError(t, err, `signal "go": durable wait timed out`)

	// The next attempt gets the same answers back, without waiting.
	tk.retry(t)
	j = tk.journal()
	got, err = j.AwaitSignal(ctx, "go", 0, never.park)
	require.NoError(t, err)
	require.JSONEq(t, `{"n":1}`, string(got))
	got, err = j.AwaitSignal(ctx, "go", 0, never.park)
	require.NoError(t, err)
	require.JSONEq(t, `null`, string(got))
	_, err = j.AwaitSignal(ctx, "go", time.Hour, never.park)
	require.ErrorIs(t, err, errTimeout)

	_, err = j.AwaitSignal(ctx, "", 0, never.park)
	require.EqualError(t, err, "invalid input: signal name is empty")
	_, err = j.AwaitSignal(ctx, "go", -time.Second, never.park)
	require.EqualError(t, err, `invalid input: signal "go": timeout must not be negative, got -1s`)
}

func TestAwaitRunsParksUntilTheRunsFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tk := setup(t)
	j := tk.journal()
	p := &park{do: func(context.Context, func(context.Context) (bool, time.Duration, error)) error { return errStopped }}

	_, err := j.AwaitRuns(ctx, []int64{0}, p.park)
	require.EqualError(t, err, "invalid input: await runs: run id 0 must be positive")
	_, err = j.AwaitRuns(ctx, []int64{1 << 40}, p.park)
	require.ErrorIs(t, err, errNotFound)
	require.EqualError(t, err, "await runs: not found")

	// The task's own run is unfinished: the wait parks.
	_, err = j.AwaitRuns(ctx, []int64{tk.run}, p.park)
	require.EqualError(t, err, "await runs: stopped")
	require.Equal(t, store.Wait{Kind: store.WaitKindRuns, Name: "1 runs", Since: p.waits[0].Since}, p.waits[0])
	require.Equal(t, time.Second, p.everys[0])
	require.Contains(t, tk.steps(t), "cairn:runs#3", "the third wait begun, journaled")

	// Once it finished, the wait ends with its outputs.
	p.do = func(ctx context.Context, check func(context.Context) (bool, time.Duration, error)) error {
		done, _, err := check(ctx)
		require.NoError(t, err)
		require.False(t, done)
		_, err = tk.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: tk.worker,
			Items: []store.TransitionItem{{TaskID: tk.id, To: store.StatusCompleted, Attempt: tk.held.Attempt, Output: json.RawMessage(`{"x":1}`)}}})
		require.NoError(t, err)
		done, _, err = check(ctx)
		require.NoError(t, err)
		require.True(t, done)
		return nil
	}
	out, err := j.AwaitRuns(ctx, []int64{tk.run}, p.park)
	require.NoError(t, err)
	require.Len(t, out, 1)
	require.Equal(t, store.StatusCompleted, out[0].Status)
	require.JSONEq(t, `{"x":1}`, string(out[0].Outputs["only"]))
}

func TestSpawnJournalsEachChildOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tk := setup(t)
	seen := map[string]bool{}
	where, step, err := errs.SpawnStep(0, 2, "kid", seen)
	require.NoError(t, err)
	require.Equal(t, `spawn 0 ("kid")`, where)
	require.Equal(t, "cairn:spawn/kid", step)
	_, _, err = errs.SpawnStep(1, 2, "kid", seen)
	require.EqualError(t, err, `spawn 1 ("kid"): invalid input: spawn name "kid" given twice`)
	_, _, err = errs.SpawnStep(0, 1, "", map[string]bool{})
	require.EqualError(t, err, `spawn "": invalid input: spawn name is empty`)

	first, err := tk.journal().Spawn(ctx, []string{step}, runs(1, "child"))
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.False(t, first[0].Existing)

	tk.retry(t)
	again, err := tk.journal().Spawn(ctx, []string{step, "cairn:spawn/other"}, runs(2, "child"))
	require.NoError(t, err)
	require.Equal(t, store.SpawnResult{Run: first[0].Run, Existing: true}, again[0], "the journaled run comes back")
	require.False(t, again[1].Existing)

	stale := journal.New(journal.Config{Errors: errs, Store: tk.st, Holder: store.StepHolder{TaskID: tk.id, WorkerID: tk.worker, Attempt: 1}})
	_, err = stale.Spawn(ctx, []string{"cairn:spawn/late"}, runs(1, "child"))
	require.EqualError(t, err, "spawn runs: task taken from this worker")
}
