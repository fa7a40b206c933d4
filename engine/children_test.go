package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// childInput is the input of the test child workflow.
type childInput struct {
	N    int  `json:"n"`
	Fail bool `json:"fail,omitempty"`
}

// registerChild registers "child": it outputs {"twice": 2n}, or fails
// for good when asked to.
func registerChild(t *testing.T, e env) {
	t.Helper()
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "child", Tasks: []engine.Task{{Name: "double",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			var in childInput
			if err := h.Input(&in); err != nil {
				return engine.Permanent(err)
			}
			if in.Fail {
				return engine.Permanent(errors.New("asked to fail"))
			}
			return h.SetOutput(map[string]int{"twice": 2 * in.N})
		}}}}))
}

func childrenOf(t testing.TB, e env, taskID int64) []int64 {
	t.Helper()
	rows, err := e.db.SQL.Query(`SELECT id FROM cairn.runs WHERE parent_task_id = $1 ORDER BY id`, taskID)
	require.NoError(t, err)
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

func TestSpawnRunIsJournaledByNameAndNeverSpawnsTwice(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	registerChild(t, e)
	type spawned struct {
		attempt  int
		one      *engine.Run
		batch    []*engine.Run
		refusals []error
	}
	got := make(chan spawned, 2)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "parent", Tasks: []engine.Task{{Name: "fan",
		Retry: engine.RetryPolicy{MaxAttempts: 2, InitialDelay: time.Millisecond, NoJitter: true},
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			s := spawned{attempt: h.Attempt()}
			var err error
			if s.one, err = h.SpawnRun(ctx, "first", "child", childInput{N: 1}); err != nil {
				return err
			}
			if s.batch, err = h.SpawnRuns(ctx, []engine.Spawn{
				{Name: "b1", Workflow: "child", Input: childInput{N: 2}},
				{Name: "b2", Workflow: "child", Input: childInput{N: 3}},
			}); err != nil {
				return err
			}
			// Refused, naming what was wrong, and writing nothing.
			_, e1 := h.SpawnRun(ctx, "nope", "no-such-workflow", nil)
			_, e2 := h.SpawnRun(ctx, "", "child", nil)
			_, e3 := h.SpawnRun(ctx, "bad-input", "child", "[1]")
			_, e4 := h.SpawnRuns(ctx, []engine.Spawn{{Name: "x", Workflow: "child"}, {Name: "x", Workflow: "child"}})
			s.refusals = []error{e1, e2, e3, e4}
			got <- s
			if h.Attempt() == 1 {
				return errors.New("crash after spawning") // the retry replays the spawns
			}
			return nil
		}}}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "parent", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 30*time.Second).Status)

	first, second := <-got, <-got
	require.Equal(t, 1, first.attempt)
	require.Equal(t, 2, second.attempt)
	require.False(t, first.one.Existing)
	require.True(t, second.one.Existing, "the replay got the journaled run back")
	require.Equal(t, first.one.ID, second.one.ID)
	for i := range first.batch {
		require.Equal(t, first.batch[i].ID, second.batch[i].ID)
		require.True(t, second.batch[i].Existing)
	}
	require.ErrorIs(t, first.refusals[0], engine.ErrUnknownWorkflow)
	require.ErrorIs(t, first.refusals[1], engine.ErrInvalidInput)
	require.ErrorContains(t, first.refusals[1], "spawn name")
	require.ErrorIs(t, first.refusals[2], engine.ErrInvalidInput)
	require.ErrorIs(t, first.refusals[3], engine.ErrInvalidInput)
	require.ErrorContains(t, first.refusals[3], "given twice")

	parent := onlyTask(t, e, run.ID)
	require.Equal(t, []int64{first.one.ID, first.batch[0].ID, first.batch[1].ID}, childrenOf(t, e, parent.ID),
		"three children, each spawned once, linked to the parent task")
	for _, id := range childrenOf(t, e, parent.ID) {
		r, err := e.st.RunGet(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, parent.ID, *r.ParentTaskID)
	}
}

func TestAwaitRunsReturnsStatusesAndOutputsWokenByTheChildren(t *testing.T) {
	t.Parallel()
	// A poll interval far beyond the test's deadline: only the children's
	// wake-ups can end the wait in time.
	e := setup(t, func(c *engine.Config) { c.PollInterval = time.Minute })
	// The children run once the parent is parked: finished before its
	// wait began, they would not need to wake it.
	release := make(chan struct{})
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "gated", Tasks: []engine.Task{{Name: "double",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
			var in childInput
			if err := h.Input(&in); err != nil {
				return engine.Permanent(err)
			}
			if in.Fail {
				return engine.Permanent(errors.New("asked to fail"))
			}
			return h.SetOutput(map[string]int{"twice": 2 * in.N})
		}}}}))
	got := make(chan []engine.RunOutcome, 1)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "parent", Tasks: []engine.Task{{Name: "fan",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			runs, err := h.SpawnRuns(ctx, []engine.Spawn{
				{Name: "ok", Workflow: "gated", Input: childInput{N: 21}},
				{Name: "bad", Workflow: "gated", Input: childInput{Fail: true}},
			})
			if err != nil {
				return err
			}
			out, err := h.AwaitRuns(ctx, runs[0].ID, runs[1].ID)
			if err != nil {
				return err
			}
			got <- out
			return nil
		}}}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "parent", nil)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "the parent parked in its wait", func() bool {
		return onlyTask(t, e, run.ID).Status == store.StatusDeferred
	})
	close(release)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 30*time.Second).Status)

	out := <-got
	require.Len(t, out, 2)
	require.Equal(t, store.RunCompleted, out[0].Status)
	require.JSONEq(t, `{"twice": 42}`, string(out[0].Outputs["double"]))
	require.Equal(t, store.RunFailed, out[1].Status)
	require.Empty(t, out[1].Outputs)

	parent := onlyTask(t, e, run.ID)
	events, err := e.st.EventListByTask(context.Background(), parent.ID)
	require.NoError(t, err)
	parked := false
	for _, ev := range events {
		if ev.To == store.StatusDeferred {
			parked = true
		}
	}
	require.True(t, parked, "the parent was parked while its children ran")
	require.Contains(t, steps(t, e, parent.ID), "cairn:runs#1", "the wait was journaled")
}

func TestAwaitRunsHoldsNoSlot(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.Queues = map[string]engine.QueueConfig{"default": {Slots: 1}} })
	registerChild(t, e)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "parent", Tasks: []engine.Task{{Name: "fan",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			spawns := make([]engine.Spawn, 5)
			for i := range spawns {
				spawns[i] = engine.Spawn{Name: fmt.Sprintf("c%d", i), Workflow: "child", Input: childInput{N: i}}
			}
			runs, err := h.SpawnRuns(ctx, spawns)
			if err != nil {
				return err
			}
			ids := make([]int64, len(runs))
			for i, r := range runs {
				ids[i] = r.ID
			}
			out, err := h.AwaitRuns(ctx, ids...)
			if err != nil {
				return err
			}
			sum := 0
			for _, o := range out {
				var v struct{ Twice int }
				if err := json.Unmarshal(o.Outputs["double"], &v); err != nil {
					return err
				}
				sum += v.Twice
			}
			return h.SetOutput(map[string]int{"sum": sum})
		}}}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "parent", nil)
	require.NoError(t, err)
	// With one slot, a parent that kept it while waiting would wait
	// forever for children that cannot start.
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 30*time.Second).Status)
	require.JSONEq(t, `{"sum": 20}`, string(onlyTask(t, e, run.ID).Output))
}

func TestCancelRunCancelsUnfinishedChildrenAndGrandchildren(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	blocked := registerLeaf(t, e)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "done", Tasks: []engine.Task{{Name: "quick",
		Run: func(ctx context.Context, h *engine.TaskHandle) error { return nil }}}}))
	registerSpawner(t, e, "middle", "leaf")
	finished := make(chan int64, 1)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "top", Tasks: []engine.Task{{Name: "spawn",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			quick, err := h.SpawnRun(ctx, "done", "done", nil)
			if err != nil {
				return err
			}
			if _, err := h.AwaitRuns(ctx, quick.ID); err != nil {
				return err
			}
			finished <- quick.ID
			r, err := h.SpawnRun(ctx, "middle", "middle", nil)
			if err != nil {
				return err
			}
			_, err = h.AwaitRuns(ctx, r.ID)
			return err
		}}}}))
	start(t, e.eng)
	ctx := context.Background()
	top, err := e.eng.Enqueue(ctx, "top", nil)
	require.NoError(t, err)
	quick := <-finished
	eventually(t, 30*time.Second, "the grandchild to run", func() bool { return blocked.Load() == 1 })

	require.NoError(t, e.eng.CancelRun(ctx, top.ID))
	require.Equal(t, store.RunCancelled, waitRun(t, e.st, top.ID, 30*time.Second).Status)
	middle := childrenOf(t, e, onlyTask(t, e, top.ID).ID)
	require.Len(t, middle, 2)
	require.Equal(t, quick, middle[0])
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, middle[0], time.Second).Status, "a finished child stays as it was")
	require.Equal(t, store.RunCancelled, waitRun(t, e.st, middle[1], 10*time.Second).Status)
	leaf := childrenOf(t, e, onlyTask(t, e, middle[1]).ID)
	require.Len(t, leaf, 1)
	require.Equal(t, store.RunCancelled, waitRun(t, e.st, leaf[0], 10*time.Second).Status, "the grandchild was cancelled too")
}

// Cancelling a parent cancels its unfinished children in the same
// transaction: when the children's cancel fails, nothing is cancelled, so
// no child is ever left running under a cancelled parent.
func TestCancelRunCascadesInOneTransaction(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	blocked := registerLeaf(t, e)
	registerSpawner(t, e, "top", "leaf")
	start(t, e.eng)
	ctx := context.Background()
	top, err := e.eng.Enqueue(ctx, "top", nil)
	require.NoError(t, err)
	eventually(t, 30*time.Second, "the child to run", func() bool { return blocked.Load() == 1 })
	child := childrenOf(t, e, onlyTask(t, e, top.ID).ID)
	require.Len(t, child, 1)

	// The child's cancel fails (as a process dying between the two would
	// leave it undone): the parent's cancel is undone with it.
	_, err = e.db.SQL.Exec(fmt.Sprintf(`
CREATE FUNCTION cairn.refuse_child_cancel() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'child cancel refused';
END $$;
CREATE TRIGGER refuse_child_cancel BEFORE UPDATE ON cairn.tasks FOR EACH ROW
	WHEN (NEW.status = 'cancelled' AND OLD.run_id = %d) EXECUTE FUNCTION cairn.refuse_child_cancel();`, child[0]))
	require.NoError(t, err)
	require.ErrorContains(t, e.eng.CancelRun(ctx, top.ID), "child cancel refused")
	require.NotEqual(t, store.StatusCancelled, onlyTask(t, e, top.ID).Status, "the parent's cancel was rolled back")
	require.Equal(t, store.RunRunning, runStatus(t, e, child[0]))

	_, err = e.db.SQL.Exec(`DROP TRIGGER refuse_child_cancel ON cairn.tasks`)
	require.NoError(t, err)
	require.NoError(t, e.eng.CancelRun(ctx, top.ID))
	require.Equal(t, store.RunCancelled, waitRun(t, e.st, top.ID, 30*time.Second).Status)
	require.Equal(t, store.RunCancelled, waitRun(t, e.st, child[0], 10*time.Second).Status)
}

// runStatus reads a run's status now.
func runStatus(t *testing.T, e env, id int64) string {
	t.Helper()
	r, err := e.st.RunGet(context.Background(), id)
	require.NoError(t, err)
	return r.Status
}

// registerLeaf registers "leaf": its one task runs until cancelled; the
// counter says how many started.
func registerLeaf(t *testing.T, e env) *atomic.Int64 {
	t.Helper()
	var blocked atomic.Int64
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "leaf", Tasks: []engine.Task{{Name: "block",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			blocked.Add(1)
			<-ctx.Done()
			return ctx.Err()
		}}}}))
	return &blocked
}

// registerSpawner registers workflow name: its one task spawns a run of
// child and waits for it.
func registerSpawner(t *testing.T, e env, name, child string) {
	t.Helper()
	require.NoError(t, e.eng.Register(engine.Workflow{Name: name, Tasks: []engine.Task{{Name: "spawn",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			r, err := h.SpawnRun(ctx, child, child, nil)
			if err != nil {
				return err
			}
			_, err = h.AwaitRuns(ctx, r.ID)
			return err
		}}}}))
}
