package parker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/engine/internal/producer"
	"github.com/cairnhq/cairn/engine/internal/timers"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var (
	errLost    = errors.New("task lost")
	errStopped = fmt.Errorf("%w: stopped", errLost)
)

type exec struct {
	executor.Execution
	q *producer.Queue[*exec]
}

func (x *exec) Exec() *executor.Execution     { return &x.Execution }
func (x *exec) Queue() *producer.Queue[*exec] { return x.q }

// countingStore is the real store, counting the statements the writers
// call.
type countingStore struct {
	*store.Store
	mu    sync.Mutex
	calls map[string]int
}

func (s *countingStore) count(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[name]++
}

func (s *countingStore) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.calls)
}

func (s *countingStore) Transition(ctx context.Context, p store.TransitionParams) ([]store.Moved, error) {
	s.count("Transition")
	return s.Store.Transition(ctx, p)
}

func (s *countingStore) TaskParkAndClaimOne(ctx context.Context, p store.TransitionParams, c store.ClaimParams) ([]store.Moved, []store.Claimed, error) {
	s.count("TaskParkAndClaimOne")
	return s.Store.TaskParkAndClaimOne(ctx, p, c)
}

func (s *countingStore) TaskDeferAndClaim(ctx context.Context, p store.TaskDeferClaimParams) ([]store.Moved, []store.Claimed, error) {
	s.count("TaskDeferAndClaim")
	return s.Store.TaskDeferAndClaim(ctx, p)
}

func (s *countingStore) TaskResumeBatch(ctx context.Context, p store.TaskResumeParams) ([]store.Moved, error) {
	s.count("TaskResumeBatch")
	return s.Store.TaskResumeBatch(ctx, p)
}

// env is a parker over a test database with one queue, "default".
type env struct {
	db      *pgtest.DB
	st      *countingStore
	worker  int64
	q       *producer.Queue[*exec]
	wakeups *timers.Wakeups
	p       *Parker[*exec]

	mu      sync.Mutex
	started []store.Claimed // rows handed to Config.Start
	settled map[int64]error // failures recorded by Config.Settled
	writes  []int           // executions per write attempt (Config.OnWrite)
}

func setup(t *testing.T, slots int) *env {
	t.Helper()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, st.QueueEnsure(ctx, []string{"default"}))
	worker, err := st.WorkerInsert(ctx, "test", map[string]int{"default": slots})
	require.NoError(t, err)
	e := &env{db: db, st: &countingStore{Store: st, calls: map[string]int{}}, worker: worker,
		q: producer.NewQueue[*exec]("default", slots), wakeups: timers.NewWakeups(time.Now), settled: map[int64]error{}}
	t.Cleanup(e.wakeups.Stop)
	e.p = New(Config[*exec]{Store: e.st, WorkerID: worker, Lease: time.Hour, Max: 100,
		Queues: producer.Queues[*exec]{"default": e.q}, Keyed: func() bool { return false },
		Held:  func() int { return 0 },
		Clock: time.Now, Health: backoff.NewHealth(slog.New(slog.DiscardHandler), time.Now), Wakeups: e.wakeups,
		Start: func(q *producer.Queue[*exec], c store.Claimed) {
			require.Same(t, e.q, q)
			e.mu.Lock()
			defer e.mu.Unlock()
			e.started = append(e.started, c)
		},
		Settled: func(x *exec, err error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.settled[x.Task.ID] = err
		},
		Lost: errLost, Stopped: errStopped,
		OnWrite: func(_ time.Time, _ string, exs []*exec, _ []store.Claimed, _ error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.writes = append(e.writes, len(exs))
		},
		OnCommit: func([]store.Moved, int) {}})
	t.Cleanup(e.p.Stop)
	return e
}

// enqueue inserts n one-task runs.
func (e *env) enqueue(t *testing.T, n int) {
	t.Helper()
	ps := make([]store.RunInsertParams, n)
	for i := range ps {
		ps[i] = store.RunInsertParams{Workflow: "w", Input: json.RawMessage(`{}`), Queue: "default",
			Tasks: []store.TaskTemplate{{Idx: 0, Name: "only", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}
	}
	_, err := e.st.RunInsertMany(context.Background(), ps)
	require.NoError(t, err)
}

// claim claims n ready tasks, takes a slot for each and returns their
// executions, running.
func (e *env) claim(t *testing.T, n int) []*exec {
	t.Helper()
	cs, err := e.st.TaskClaim(context.Background(), store.ClaimParams{WorkerID: e.worker, Queues: []string{"default"}, Limits: []int{n}, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, cs, n)
	require.Equal(t, n, e.q.Slots.TryAcquireUpTo(n))
	xs := make([]*exec, n)
	for i, c := range cs {
		xs[i] = &exec{q: e.q}
		xs[i].Init(c, time.Now())
	}
	return xs
}

func (e *env) status(t *testing.T, id int64) string {
	t.Helper()
	tk, err := e.st.TaskGet(context.Background(), id)
	require.NoError(t, err)
	return tk.Status
}

func (e *env) request(x *exec) *request[*exec] {
	return &request[*exec]{x: x, every: time.Second, since: time.Now(), ctx: context.Background(), reply: make(chan error, 1)}
}

// parkAll parks xs concurrently through Park and returns each one's
// answer.
func (e *env) parkAll(xs []*exec) []error {
	errs := make([]error, len(xs))
	var wg sync.WaitGroup
	for i, x := range xs {
		wg.Go(func() { errs[i] = e.p.Park(context.Background(), x, nil, time.Second) })
	}
	wg.Wait()
	return errs
}

// A batch of parks is one statement that answers each request, marks
// nothing lost, and gives back the slots (nothing else is ready).
func TestParkBatchIsOneStatementAndAnswersEach(t *testing.T) {
	t.Parallel()
	const n = 5
	e := setup(t, n)
	e.enqueue(t, n)
	xs := e.claim(t, n)
	batch := make([]*request[*exec], n)
	for i, x := range xs {
		batch[i] = e.request(x)
	}
	e.p.parks.flush(batch)
	for i, x := range xs {
		require.NoError(t, <-batch[i].reply)
		require.False(t, x.HoldsSlot.Load())
		require.Equal(t, store.StatusDeferred, e.status(t, x.Task.ID))
	}
	require.Equal(t, map[string]int{"TaskParkAndClaimOne": 1}, e.st.Calls())
	park, resume := e.p.Writes()
	require.Equal(t, [2]int64{1, 0}, [2]int64{park, resume})
	require.Equal(t, []int{n}, e.writes)
	require.Equal(t, n, e.q.Slots.Available())
	require.Empty(t, e.started)
	require.Empty(t, e.settled)
}

// Park through the running writer: every handler is answered, its
// execution marked parked, and the writes are fewer than the tasks or
// as many at most.
func TestParkAnswersEachSubmitter(t *testing.T) {
	t.Parallel()
	const n = 8
	e := setup(t, n)
	require.NoError(t, e.p.Start(context.Background()))
	e.enqueue(t, n)
	xs := e.claim(t, n)
	for i, err := range e.parkAll(xs) {
		require.NoError(t, err)
		require.True(t, xs[i].Parked.Load())
		require.Equal(t, store.StatusDeferred, e.status(t, xs[i].Task.ID))
	}
	park, _ := e.p.Writes()
	require.LessOrEqual(t, park, int64(n))
	require.Equal(t, n, e.q.Slots.Available())
}

// A row that is no longer running (taken behind the writer's back) is
// answered with the lost error and keeps its slot; the rest of the
// batch parks.
func TestParkOfRowNoLongerRunningIsLost(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	require.NoError(t, e.p.Start(context.Background()))
	e.enqueue(t, 2)
	xs := e.claim(t, 2)
	_, err := e.db.SQL.Exec(fmt.Sprintf(`UPDATE %s.tasks SET status = 'cancelled', worker_id = NULL WHERE id = $1`, pgtest.Schema), xs[0].Task.ID)
	require.NoError(t, err)
	errs := e.parkAll(xs)
	require.ErrorIs(t, errs[0], errLost)
	require.NotErrorIs(t, errs[0], errStopped)
	require.NoError(t, errs[1])
	require.ErrorIs(t, e.settled[xs[0].Task.ID], errLost)
	require.False(t, xs[0].Parked.Load())
	require.True(t, xs[0].HoldsSlot.Load(), "a lost task's slot is its handler's to give back")
	require.True(t, xs[1].Parked.Load())
	require.Equal(t, 1, e.q.Slots.Available())
}

// Stop is safe twice and before Start; a request after Stop is answered
// with the stopped error, and Start after Stop runs nothing.
func TestStopTwiceBeforeStartAndSubmitAfterStop(t *testing.T) {
	t.Parallel()
	e := setup(t, 2)
	e.enqueue(t, 2)
	xs := e.claim(t, 2)
	e.p.Stop()
	e.p.Stop()
	require.NoError(t, e.p.Start(context.Background()))
	err := e.p.Park(context.Background(), xs[0], nil, time.Second)
	require.ErrorIs(t, err, errStopped)
	require.ErrorIs(t, e.settled[xs[0].Task.ID], errStopped)

	p := New(e.p.cfg)
	require.NoError(t, p.Start(context.Background()))
	require.NoError(t, p.Start(context.Background()))
	p.Stop()
	p.Stop()
	require.ErrorIs(t, p.Park(context.Background(), xs[1], nil, time.Second), errStopped)
	xs[1].Parked.Store(true)
	xs[1].HoldsSlot.Store(false)
	e.q.Slots.Release(1)
	require.ErrorIs(t, p.Resume(context.Background(), xs[1]), errStopped)
	require.Empty(t, e.st.Calls())
}

// A park write that frees slots claims as many ready rows in its own
// statement and hands them to Config.Start with the freed slots.
func TestParkClaimsForTheSlotsItFrees(t *testing.T) {
	t.Parallel()
	const n = 4
	e := setup(t, n)
	e.enqueue(t, 2*n)
	xs := e.claim(t, n)
	batch := make([]*request[*exec], n)
	for i, x := range xs {
		batch[i] = e.request(x)
	}
	e.p.parks.flush(batch)
	for _, r := range batch {
		require.NoError(t, <-r.reply)
	}
	require.Len(t, e.started, n)
	parked := map[int64]bool{}
	for _, x := range xs {
		parked[x.Task.ID] = true
	}
	for _, c := range e.started {
		require.False(t, parked[c.ID])
		require.Equal(t, "default", c.Queue)
		require.Equal(t, store.StatusRunning, e.status(t, c.ID))
	}
	require.Equal(t, int64(n), e.p.ClaimedOnPark())
	require.Zero(t, e.q.Slots.Available(), "the freed slots are the claimed tasks'")
	require.Equal(t, map[string]int{"TaskParkAndClaimOne": 1}, e.st.Calls())
}

// A parked task waits on the shared timer until its check reports done,
// then takes a slot back and its row goes back to running.
func TestWaitThenResume(t *testing.T) {
	t.Parallel()
	e := setup(t, 1)
	require.NoError(t, e.p.Start(context.Background()))
	e.enqueue(t, 1)
	x := e.claim(t, 1)[0]
	require.NoError(t, e.p.Park(context.Background(), x, nil, time.Hour))
	require.Equal(t, 1, e.q.Slots.Available())

	checks := 0
	done := make(chan error, 1)
	go func() {
		done <- e.p.Wait(context.Background(), x, time.Hour, func(context.Context) (bool, time.Duration, error) {
			checks++
			return checks == 2, 0, nil
		})
	}()
	x.Signal <- struct{}{}
	x.Signal <- struct{}{}
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not return after its check reported done")
	}
	require.Equal(t, 2, checks)
	require.Zero(t, e.wakeups.Len())

	require.NoError(t, e.p.Resume(context.Background(), x))
	require.False(t, x.Parked.Load())
	require.True(t, x.HoldsSlot.Load())
	require.Zero(t, e.q.Slots.Available())
	require.Equal(t, store.StatusRunning, e.status(t, x.Task.ID))
	_, resume := e.p.Writes()
	require.Equal(t, int64(1), resume)
}
