package engine_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// TestReadmeRelationsHaveChecks: every relation of the schema that the
// README names (cairn.<name>, or a backquoted name in its SQL section) has
// a check above, and every check is of a relation that exists.
func TestReadmeRelationsHaveChecks(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	db := pgtest.New(t)
	rows, err := db.SQL.Query(`SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'cairn' AND c.relkind IN ('r', 'v', 'p') AND NOT c.relispartition`)
	require.NoError(t, err)
	schema := map[string]bool{}
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		schema[name] = true
	}
	require.NoError(t, rows.Err())
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("(?:cairn\\.|`)([a-z_]+)\\b").FindAllStringSubmatch(string(readme), -1) {
		if schema[m[1]] {
			named[m[1]] = true
		}
	}
	require.NotEmpty(t, named)
	for name := range named {
		if name == "run_rows" || name == "task_counts" || name == "task_count_deltas" || name == "schema_migrations" {
			continue // named to say they are not for reading (their columns lag) or the runner's own
		}
		_, checked := pgtest.RelationChecks[name]
		_, own := pgtest.EngineTables[name]
		require.True(t, checked || own, "the README offers %s for reading: add its check", name)
	}
	for name := range pgtest.RelationChecks {
		require.True(t, schema[name], "check of %s, which is not in the schema", name)
	}
	for name := range pgtest.EngineTables {
		require.True(t, schema[name], "%s is not in the schema", name)
	}
}

// gate holds a handler of the relations test until the test lets it go,
// and tells the test when it has started.
type gate struct {
	started chan int64 // the task id, once per call
	release chan error // what the call returns
}

func newGate() gate { return gate{started: make(chan int64, 16), release: make(chan error)} }

func (g gate) run(ctx context.Context, h *engine.TaskHandle) error {
	g.started <- h.TaskID()
	select {
	case err := <-g.release:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestRelationsAgreeWithTheEngineAtEachStep drives runs of every kind
// through their lives (a one-task run, a DAG, a retried and failed task,
// a paused run, a deferral, a child run, a run that waits for another,
// a cancelled run) and checks every documented relation at each step.
func TestRelationsAgreeWithTheEngineAtEachStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, nil)
	one, a, b, flaky, deferred, parent := newGate(), newGate(), newGate(), newGate(), newGate(), newGate()
	ready := make(chan bool, 1)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "one", Tasks: []engine.Task{{Name: "x", Run: one.run}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "dag", Tasks: []engine.Task{
		{Name: "a", Run: a.run},
		{Name: "b", Deps: []string{"a"}, Run: b.run},
		{Name: "c", Deps: []string{"a"}, Run: func(context.Context, *engine.TaskHandle) error { return nil }},
	}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "flaky", Tasks: []engine.Task{{Name: "x", Run: flaky.run,
		Retry: engine.RetryPolicy{MaxAttempts: 2, InitialDelay: time.Millisecond, NoJitter: true}}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "deferred", Tasks: []engine.Task{{Name: "x",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			deferred.started <- h.TaskID()
			return h.DeferUntil(ctx, func(context.Context) bool {
				select {
				case <-ready:
					return true
				default:
					return false
				}
			}, 10*time.Millisecond)
		}}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "parent", Tasks: []engine.Task{{Name: "x",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			child, err := h.SpawnRun(ctx, "child", "one", nil)
			if err != nil {
				return err
			}
			parent.started <- child.ID
			_, err = h.AwaitRuns(ctx, child.ID)
			return err
		}}}}))
	start(t, e.eng)
	check := func(step string) { t.Helper(); pgtest.CheckRelations(t, e.db.SQL, step) }
	status := func(id int64, want string) {
		t.Helper()
		eventually(t, 10*time.Second, "run status "+want, func() bool {
			r, err := e.st.RunGet(ctx, id)
			require.NoError(t, err)
			return r.Status == want
		})
		var sqlStatus string
		require.NoError(t, e.db.SQL.QueryRow(`SELECT status FROM cairn.runs WHERE id = $1`, id).Scan(&sqlStatus))
		require.Equal(t, want, sqlStatus, "plain SQL on cairn.runs")
	}
	// makeAvailable moves a run's tasks enqueued for later to now; the
	// poll interval finds them.
	makeAvailable := func(id int64) {
		t.Helper()
		_, err := e.db.SQL.Exec(`UPDATE cairn.tasks SET available_at = now() WHERE run_id = $1`, id)
		require.NoError(t, err)
	}
	enqueue := func(workflow string, opts ...engine.EnqueueOption) int64 {
		t.Helper()
		r, err := e.eng.Enqueue(ctx, workflow, map[string]int{}, opts...)
		require.NoError(t, err)
		return r.ID
	}
	check("start")

	// A one-task run: pending, running, completed.
	r1 := enqueue("one", engine.WithRunAt(time.Now().Add(time.Hour)))
	status(r1, store.RunPending)
	check("one-task run pending")
	makeAvailable(r1)
	<-one.started
	status(r1, store.RunRunning)
	check("one-task run running")
	one.release <- nil
	status(r1, store.RunCompleted)
	check("one-task run completed")

	// A DAG: a runs, then b (held) beside c, then all complete.
	r2 := enqueue("dag")
	<-a.started
	status(r2, store.RunRunning)
	check("dag: a running")
	a.release <- nil
	<-b.started
	check("dag: b running after a")
	b.release <- nil
	status(r2, store.RunCompleted)
	check("dag completed")

	// The DAG rerun from b: a created completed with its output, b held
	// again, c run again beside it.
	rr, err := e.eng.RerunFrom(ctx, r2, "b")
	require.NoError(t, err)
	<-b.started
	status(rr.ID, store.RunRunning)
	check("rerun: a copied, b running")
	b.release <- nil
	status(rr.ID, store.RunCompleted)
	check("rerun completed")

	// A retried task: its first attempt fails, the second fails for good.
	r3 := enqueue("flaky")
	<-flaky.started
	check("flaky: first attempt")
	flaky.release <- errors.New("first")
	<-flaky.started
	status(r3, store.RunRunning)
	check("flaky: second attempt")
	flaky.release <- errors.New("second")
	status(r3, store.RunFailed)
	check("flaky failed")

	// A paused run: paused while pending, resumed, then run.
	r4 := enqueue("one", engine.WithRunAt(time.Now().Add(time.Hour)))
	require.NoError(t, e.eng.PauseRun(ctx, r4))
	status(r4, store.RunPaused)
	check("paused")
	require.NoError(t, e.eng.ResumeRun(ctx, r4))
	status(r4, store.RunPending)
	check("resumed")
	makeAvailable(r4)
	<-one.started
	one.release <- nil
	status(r4, store.RunCompleted)
	check("resumed run completed")

	// A deferral: running, deferred without a slot, resumed, completed.
	r5 := enqueue("deferred")
	<-deferred.started
	eventually(t, 10*time.Second, "task deferred", func() bool {
		var s string
		require.NoError(t, e.db.SQL.QueryRow(`SELECT status FROM cairn.tasks WHERE run_id = $1`, r5).Scan(&s))
		return s == store.StatusDeferred
	})
	status(r5, store.RunRunning)
	check("deferred")
	ready <- true
	status(r5, store.RunCompleted)
	check("deferral completed")

	// A child run awaited by its parent task.
	r6 := enqueue("parent")
	child := <-parent.started
	<-one.started
	status(child, store.RunRunning)
	check("child running, parent awaiting")
	one.release <- nil
	status(child, store.RunCompleted)
	status(r6, store.RunCompleted)
	check("child and parent completed")

	// A run that waits for another, then a cancelled run.
	first := enqueue("one")
	<-one.started
	after := enqueue("one", engine.WithAfter(first))
	status(after, store.RunPending)
	check("waiting for another run")
	one.release <- nil
	<-one.started
	status(first, store.RunCompleted)
	check("awaited run completed, the waiting one running")
	one.release <- nil
	status(after, store.RunCompleted)

	r7 := enqueue("dag")
	<-a.started
	require.NoError(t, e.eng.CancelRun(ctx, r7))
	status(r7, store.RunCancelled)
	check("cancelled")
}
