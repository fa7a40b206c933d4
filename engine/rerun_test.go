package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// chain is a workflow a -> b -> c whose handlers count their calls and
// record what they saw: a outputs {"a": n} (its call number), b outputs
// {"b": "<x of its input>+<a>"}, c fails while failC is set.
type chain struct {
	mu    sync.Mutex
	calls map[string]int
	seen  map[string]map[string]any // task -> its input (run input merged with its deps' outputs)
	failC bool
}

func (c *chain) handler(name string) engine.Handler {
	return func(ctx context.Context, h *engine.TaskHandle) error {
		var in map[string]any
		if err := h.Input(&in); err != nil {
			return err
		}
		c.mu.Lock()
		c.calls[name]++
		n, fail := c.calls[name], c.failC
		c.seen[name] = in
		c.mu.Unlock()
		switch name {
		case "a":
			return h.SetOutput(map[string]int{"a": n})
		case "b":
			return h.SetOutput(map[string]any{"b": in["x"], "a_seen": in["a"]})
		}
		if fail {
			return engine.Permanent(errTestFail)
		}
		return nil
	}
}

func (c *chain) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[name]
}

func (c *chain) input(name string) map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[name]
}

func chainWorkflow(c *chain) engine.Workflow {
	return engine.Workflow{Name: "chain", Tasks: []engine.Task{
		{Name: "a", Run: c.handler("a")},
		{Name: "b", Deps: []string{"a"}, Run: c.handler("b")},
		{Name: "c", Deps: []string{"b"}, Run: c.handler("c"), Retry: engine.RetryPolicy{MaxAttempts: 1}},
	}}
}

// TestRerunFromAMiddleTask: a failed run of a -> b -> c rerun from b runs
// b and c again, not a; b sees a's output of the first run; the new run
// links back; an edited input reaches b; the completions copied are
// journaled with the actor.
func TestRerunFromAMiddleTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, nil)
	c := &chain{calls: map[string]int{}, seen: map[string]map[string]any{}, failC: true}
	require.NoError(t, e.eng.Register(chainWorkflow(c)))
	start(t, e.eng)

	first, err := e.eng.Enqueue(ctx, "chain", map[string]any{"x": "one"})
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, waitRun(t, e.st, first.ID, 10*time.Second).Status)
	require.Equal(t, 1, c.count("a"))

	c.mu.Lock()
	c.failC = false
	c.mu.Unlock()
	actx := engine.WithActor(ctx, engine.Actor{Name: "ops", Role: "admin"})
	re, err := e.eng.RerunFrom(actx, first.ID, "b")
	require.NoError(t, err)
	require.NotEqual(t, first.ID, re.ID)
	require.Equal(t, "chain", re.Workflow)
	run := waitRun(t, e.st, re.ID, 10*time.Second)
	require.Equal(t, store.RunCompleted, run.Status)
	require.Equal(t, 1, c.count("a"), "a is not run again")
	require.Equal(t, 2, c.count("b"))
	require.Equal(t, 2, c.count("c"))
	require.Equal(t, 1.0, c.input("b")["a"], "b sees a's output of the first run")
	require.Equal(t, "one", c.input("b")["x"])
	require.NotNil(t, run.RerunOf)
	require.Equal(t, first.ID, *run.RerunOf)
	require.Equal(t, "b", *run.RerunFrom)
	require.Equal(t, 3, run.DoneTasks)
	a := taskByName(t, e.st, re.ID, "a")
	require.Equal(t, store.StatusCompleted, a.Status)
	require.JSONEq(t, `{"a": 1}`, string(a.Output))

	// The copied completion is journaled like an admin action.
	var detail json.RawMessage
	require.NoError(t, e.db.SQL.QueryRow(`SELECT detail FROM cairn.task_events WHERE task_id = $1 AND to_status = 'completed'`, a.ID).Scan(&detail))
	var d struct {
		Reason string       `json:"reason"`
		Actor  engine.Actor `json:"actor"`
	}
	require.NoError(t, json.Unmarshal(detail, &d))
	require.Equal(t, "rerun from run "+strconv.FormatInt(first.ID, 10)+" task b", d.Reason)
	require.Equal(t, "ops", d.Actor.Name)

	// With an edited input: b sees it, and still a's first output.
	re2, err := e.eng.RerunFrom(ctx, first.ID, "b", engine.WithRerunInput(map[string]any{"x": "two"}))
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, re2.ID, 10*time.Second).Status)
	require.Equal(t, 1, c.count("a"))
	require.Equal(t, 3, c.count("b"))
	require.Equal(t, "two", c.input("b")["x"])
	require.Equal(t, 1.0, c.input("b")["a"])
	pgtest.CheckRelations(t, e.db.SQL, "after reruns")

	// Rerun from the first task: nothing is copied, a runs again.
	re3, err := e.eng.RerunFrom(ctx, re2.ID, "a")
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, re3.ID, 10*time.Second).Status)
	require.Equal(t, 2, c.count("a"))
}

// TestRerunRefusals: an unknown run, a run not finished, an unknown task,
// a bad input and an upstream task that did not complete are refused
// with typed errors naming what was wrong.
func TestRerunRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, nil)
	c := &chain{calls: map[string]int{}, seen: map[string]map[string]any{}}
	require.NoError(t, e.eng.Register(chainWorkflow(c)))
	g := newGate()
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "held", Tasks: []engine.Task{{Name: "x", Run: g.run}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "bad", Tasks: []engine.Task{
		{Name: "a", Run: func(context.Context, *engine.TaskHandle) error { return engine.Permanent(errTestFail) }},
		{Name: "b", Deps: []string{"a"}, Run: func(context.Context, *engine.TaskHandle) error { return nil }},
	}}))
	start(t, e.eng)

	_, err := e.eng.RerunFrom(ctx, 999999, "a")
	require.ErrorIs(t, err, engine.ErrNotFound)

	held, err := e.eng.Enqueue(ctx, "held", nil)
	require.NoError(t, err)
	<-g.started
	_, err = e.eng.RerunFrom(ctx, held.ID, "x")
	require.ErrorIs(t, err, engine.ErrInvalidState)
	require.ErrorContains(t, err, "running")
	g.release <- nil

	done, err := e.eng.Enqueue(ctx, "chain", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, done.ID, 10*time.Second).Status)
	_, err = e.eng.RerunFrom(ctx, done.ID, "nope")
	require.ErrorIs(t, err, engine.ErrInvalidInput)
	require.ErrorContains(t, err, `"nope"`)
	_, err = e.eng.RerunFrom(ctx, done.ID, "b", engine.WithRerunInput("[1]"))
	require.ErrorIs(t, err, engine.ErrInvalidInput)

	bad, err := e.eng.Enqueue(ctx, "bad", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunFailed, waitRun(t, e.st, bad.ID, 10*time.Second).Status)
	_, err = e.eng.RerunFrom(ctx, bad.ID, "b")
	require.ErrorIs(t, err, engine.ErrInvalidState)
	require.ErrorContains(t, err, `task "a"`)
	var n int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM cairn.runs WHERE rerun_of IS NOT NULL`).Scan(&n))
	require.Zero(t, n, "a refused rerun writes nothing")
}

// TestRerunOfAStoredVersion: a run with a version this process does not
// register is rerun from the templates stored for the version, and the
// new run keeps the version.
func TestRerunOfAStoredVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, nil)
	c := &chain{calls: map[string]int{}, seen: map[string]map[string]any{}}
	wf := chainWorkflow(c)
	wf.Compatible = []string{"old"} // this worker serves the stored version's runs
	require.NoError(t, e.eng.Register(wf))
	start(t, e.eng)
	first, err := e.eng.Enqueue(ctx, "chain", map[string]any{"x": "v"})
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, first.ID, 10*time.Second).Status)

	// The stored version is the chain without c: the rerun has two tasks.
	tpl, err := json.Marshal([]store.TaskTemplate{
		{Idx: 0, Name: "a", Deps: []int{}, Dependents: []int{1}, MaxAttempts: 1},
		{Idx: 1, Name: "b", Deps: []int{0}, Dependents: []int{}, MaxAttempts: 1},
	})
	require.NoError(t, err)
	_, err = e.db.SQL.Exec(`INSERT INTO cairn.workflow_versions (workflow, version, definition, templates) VALUES ('chain', 'old', '{}', $1)`, tpl)
	require.NoError(t, err)
	_, err = e.db.SQL.Exec(`UPDATE cairn.run_rows SET version = 'old' WHERE id = $1`, first.ID)
	require.NoError(t, err)

	re, err := e.eng.RerunFrom(ctx, first.ID, "b")
	require.NoError(t, err)
	run := waitRun(t, e.st, re.ID, 10*time.Second)
	require.Equal(t, store.RunCompleted, run.Status)
	require.Equal(t, 2, run.TaskCount)
	require.Equal(t, "old", *run.Version)
	require.Equal(t, "old", *taskByName(t, e.st, re.ID, "b").Version)
	require.Equal(t, 1, c.count("a"))
	require.Equal(t, 2, c.count("b"))
	require.Equal(t, 1, c.count("c"), "c is not in the stored version")

	_, err = e.db.SQL.Exec(`UPDATE cairn.run_rows SET version = 'gone' WHERE id = $1`, first.ID)
	require.NoError(t, err)
	_, err = e.eng.RerunFrom(ctx, first.ID, "b")
	require.ErrorIs(t, err, engine.ErrInvalidState)
	require.ErrorContains(t, err, `"gone"`)
}

var errTestFail = errors.New("test failure")
