package journal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/journal"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// many inserts n single-task runs and claims their tasks (attempt 1) for
// one worker.
func many(t *testing.T, n int) (*store.Store, int64, []store.StepHolder) {
	t.Helper()
	ctx := context.Background()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(ctx, []string{"default", "kids"}))
	_, err = st.RunInsertMany(ctx, runs(n, "parent"))
	require.NoError(t, err)
	w, err := st.WorkerInsert(ctx, "w", map[string]int{"default": n})
	require.NoError(t, err)
	c, err := st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{n}, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, c, n)
	hs := make([]store.StepHolder, n)
	for i, x := range c {
		hs[i] = store.StepHolder{TaskID: x.ID, WorkerID: w, Attempt: x.Attempt}
	}
	return st, w, hs
}

// gated holds each write of the step writer until the test lets it go,
// and counts what the table holds meanwhile.
type gated struct {
	*store.Store
	entered chan int      // the size of each batch at its write
	gate    chan struct{} // closed: writes go on
}

func (g *gated) TaskStepSaveMany(ctx context.Context, saves []store.StepSave) ([]*store.Step, error) {
	g.entered <- len(saves)
	<-g.gate
	return g.Store.TaskStepSaveMany(ctx, saves)
}

// countSteps counts the journaled steps of the tasks of hs.
func countSteps(t *testing.T, st *store.Store, hs []store.StepHolder) int {
	t.Helper()
	n := 0
	for _, h := range hs {
		list, err := st.TaskStepList(context.Background(), h.TaskID)
		require.NoError(t, err)
		n += len(list)
	}
	return n
}

// Fifty handlers of different tasks journal a step each at once: the
// writer commits them in a few statements, answers each with its own
// step, and no step is in the table before its write, nor any answer
// given before it.
func TestWriterJournalsManyTasksStepsInFewStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 50
	st, _, hs := many(t, n)
	g := &gated{Store: st, entered: make(chan int, n), gate: make(chan struct{})}
	var submitted sync.WaitGroup
	submitted.Add(n)
	w := journal.NewWriter(journal.WriterConfig{Store: g, Max: 100, More: func(k int) bool { return k < n }})
	require.NoError(t, w.Start(ctx))
	defer w.Stop()

	type answer struct {
		i    int
		step *store.Step
		err  error
	}
	answers := make(chan answer, n)
	for i, h := range hs {
		go func() {
			submitted.Done()
			step, err := w.Save(ctx, h, "s", json.RawMessage(fmt.Sprintf(`{"i": %d}`, i)))
			answers <- answer{i, step, err}
		}()
	}
	submitted.Wait()
	first := <-g.entered // the first batch is at its write, held
	require.Positive(t, first)
	require.Zero(t, countSteps(t, st, hs), "nothing is journaled before the write")
	select {
	case a := <-answers:
		t.Fatalf("answer %d before its write", a.i)
	default:
	}
	close(g.gate)
	for range n {
		a := <-answers
		require.NoError(t, a.err)
		require.Equal(t, hs[a.i].TaskID, a.step.TaskID)
		require.Equal(t, 1, a.step.Attempt)
		require.JSONEq(t, fmt.Sprintf(`{"i": %d}`, a.i), string(a.step.Result))
		list, err := st.TaskStepList(ctx, hs[a.i].TaskID)
		require.NoError(t, err)
		require.Len(t, list, 1, "the step is in the table once answered")
	}
	require.LessOrEqual(t, w.Statements(), int64(10), "fifty steps in a few statements")
	require.Equal(t, n, countSteps(t, st, hs))
}

// In one statement, a stale attempt's step is refused while the others
// of the batch are written; a name journaled already returns the
// journaled step; the same name twice in one batch is written once.
func TestStepSaveManyRefusesAStaleAttemptAndWritesTheRest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, w, hs := many(t, 3)
	// hs[0]'s attempt 1 ends; attempt 2 is claimed.
	moved, err := st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: hs[0].TaskID, To: store.StatusReady, Attempt: 1}}})
	require.NoError(t, err)
	require.Len(t, moved, 1)
	c, err := st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, c, 1)
	require.Equal(t, 2, c[0].Attempt)
	_, err = st.TaskStepSave(ctx, hs[1], "old", json.RawMessage(`"first"`))
	require.NoError(t, err)

	steps, err := st.TaskStepSaveMany(ctx, []store.StepSave{
		{StepHolder: hs[0], Name: "s", Result: json.RawMessage(`"stale"`)},
		{StepHolder: hs[1], Name: "s", Result: json.RawMessage(`"one"`)},
		{StepHolder: hs[1], Name: "old", Result: json.RawMessage(`"second"`)},
		{StepHolder: hs[2], Name: "s", Result: json.RawMessage(`"two"`)},
		{StepHolder: hs[2], Name: "s", Result: json.RawMessage(`"two again"`)},
	})
	require.NoError(t, err)
	require.Len(t, steps, 5)
	require.Nil(t, steps[0], "the stale attempt's step is refused")
	require.JSONEq(t, `"one"`, string(steps[1].Result))
	require.JSONEq(t, `"first"`, string(steps[2].Result), "the journal wins")
	require.JSONEq(t, `"two"`, string(steps[3].Result))
	require.JSONEq(t, `"two"`, string(steps[4].Result), "written once")
	list, err := st.TaskStepList(ctx, hs[0].TaskID)
	require.NoError(t, err)
	require.Empty(t, list)
	require.Equal(t, 3, countSteps(t, st, hs))

	// Through the writer and the journal: the stale attempt gets the
	// journal's TaskLost, the current one journals.
	wr := journal.NewWriter(journal.WriterConfig{Store: st, Max: 10})
	require.NoError(t, wr.Start(ctx))
	defer wr.Stop()
	stale := journal.New(journal.Config{Errors: errs, Store: st, Writer: wr, Holder: hs[0]})
	_, err = journal.Step(ctx, stale, "t", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, errLost)
	require.EqualError(t, err, `journal step "t": task taken from this worker`)
	current := journal.New(journal.Config{Errors: errs, Store: st, Writer: wr, Holder: store.StepHolder{TaskID: hs[0].TaskID, WorkerID: w, Attempt: 2}})
	v, err := journal.Step(ctx, current, "t", func(context.Context) (int, error) { return 2, nil })
	require.NoError(t, err)
	require.Equal(t, 2, v)
	list, err = st.TaskStepList(ctx, hs[0].TaskID)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, 2, list[0].Attempt)
}

// Stop writes what was submitted before it returns (the engine stops
// the writer after its handlers returned); later saves are refused, and
// a journal then writes its step alone. Start and Stop are safe twice,
// and Stop before Start.
func TestWriterStopWritesWhatWasSubmitted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, hs := many(t, 2)
	idle := journal.NewWriter(journal.WriterConfig{Store: st})
	idle.Stop()
	idle.Stop()
	require.NoError(t, idle.Start(ctx))
	_, err := idle.Save(ctx, hs[0], "x", json.RawMessage(`1`))
	require.ErrorIs(t, err, journal.ErrWriterStopped)

	g := &gated{Store: st, entered: make(chan int, 1), gate: make(chan struct{})}
	w := journal.NewWriter(journal.WriterConfig{Store: g, Max: 10})
	require.NoError(t, w.Start(ctx))
	require.NoError(t, w.Start(ctx))
	saved := make(chan error, 1)
	go func() {
		_, err := w.Save(ctx, hs[0], "s", json.RawMessage(`1`))
		saved <- err
	}()
	<-g.entered
	stopped := make(chan struct{})
	go func() { w.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned before the write it waits for")
	case <-time.After(20 * time.Millisecond):
	}
	close(g.gate)
	<-stopped
	require.NoError(t, <-saved)
	w.Stop()
	require.Equal(t, 1, countSteps(t, st, hs[:1]))

	_, err = w.Save(ctx, hs[1], "s", json.RawMessage(`2`))
	require.ErrorIs(t, err, journal.ErrWriterStopped)
	j := journal.New(journal.Config{Errors: errs, Store: st, Writer: w, Holder: hs[1]})
	v, err := journal.Step(ctx, j, "s", func(context.Context) (int, error) { return 2, nil })
	require.NoError(t, err)
	require.Equal(t, 2, v)
	require.Equal(t, 1, countSteps(t, st, hs[1:]), "written alone once the writer stopped")
}

// A save whose context ended before its write is answered with the
// context's error and not written.
func TestWriterAnswersAnEndedContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _, hs := many(t, 3)
	g := &gated{Store: st, entered: make(chan int, 3), gate: make(chan struct{})}
	w := journal.NewWriter(journal.WriterConfig{Store: g, Max: 1})
	require.NoError(t, w.Start(ctx))
	defer w.Stop()
	held := make(chan error, 2)
	for _, h := range hs[:2] {
		go func() {
			_, err := w.Save(ctx, h, "s", json.RawMessage(`1`))
			held <- err
		}()
		<-g.entered // each writer holds one
	}
	cctx, cancel := context.WithCancel(ctx)
	late := make(chan error, 1)
	go func() {
		_, err := w.Save(cctx, hs[2], "s", json.RawMessage(`2`))
		late <- err
	}()
	cancel() // before a writer is free for it
	close(g.gate)
	require.NoError(t, <-held)
	require.NoError(t, <-held)
	require.ErrorIs(t, <-late, context.Canceled)
	require.Zero(t, countSteps(t, st, hs[2:]))
}

// Checkpoints go through the writer too: many tasks' in one statement,
// the last of one task's winning, a stale attempt's refused (the
// journal's TaskLost) while the others are stored.
func TestWriterStoresCheckpoints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, w, hs := many(t, 3)
	held, err := st.TaskCheckpointMany(ctx, []store.CheckpointSave{
		{StepHolder: hs[0], Value: json.RawMessage(`{"n": 1}`)},
		{StepHolder: hs[1], Value: json.RawMessage(`{"n": 2}`)},
		{StepHolder: hs[0], Value: json.RawMessage(`{"n": 3}`)},
		{StepHolder: store.StepHolder{TaskID: hs[2].TaskID, WorkerID: w, Attempt: 7}, Value: json.RawMessage(`{"n": 4}`)},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true, false}, held)
	checkpoint := func(h store.StepHolder) string {
		tk, err := st.TaskGet(ctx, h.TaskID)
		require.NoError(t, err)
		return string(tk.Checkpoint)
	}
	require.JSONEq(t, `{"n": 3}`, checkpoint(hs[0]), "the last wins")
	require.JSONEq(t, `{"n": 2}`, checkpoint(hs[1]))
	require.Empty(t, checkpoint(hs[2]), "the stale attempt's is not stored")

	wr := journal.NewWriter(journal.WriterConfig{Store: st, Max: 10})
	require.NoError(t, wr.Start(ctx))
	defer wr.Stop()
	b, err := journal.New(journal.Config{Errors: errs, Store: st, Writer: wr, Holder: hs[2]}).Checkpoint(ctx, map[string]int{"n": 5})
	require.NoError(t, err)
	require.JSONEq(t, `{"n": 5}`, string(b))
	require.JSONEq(t, `{"n": 5}`, checkpoint(hs[2]))
	stale := journal.New(journal.Config{Errors: errs, Store: st, Writer: wr, Holder: store.StepHolder{TaskID: hs[2].TaskID, WorkerID: w, Attempt: 7}})
	_, err = stale.Checkpoint(ctx, 6)
	require.ErrorIs(t, err, errLost)
	require.EqualError(t, err, "checkpoint: task taken from this worker")
	require.JSONEq(t, `{"n": 5}`, checkpoint(hs[2]))
}
