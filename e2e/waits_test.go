package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// TestDurableWaits SIGKILLs real worker processes (internal/testworker)
// parked in durable waits and checks what DESIGN.md promises in "Durable
// waits and child runs": the next attempt replays journaled steps without
// running them again, waits only for what is left, and takes each signal
// once. The tasks are of the park workflow (not RequeueOnInterrupt): a
// task in a durable wait goes back to ready all the same.
func TestDurableWaits(t *testing.T) {
	t.Parallel()
	bin := buildTestworker(t)
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, bin string)
	}{
		{"SigkillDuringSleepReplaysSteps", testSigkillDuringSleepReplaysSteps},
		{"SignalsReceivedOnceAcrossSigkill", testSignalsReceivedOnceAcrossSigkill},
		{"FanOutSpawnsEachChildOnceAcrossSigkill", testFanOutSpawnsEachChildOnceAcrossSigkill},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, bin)
		})
	}
}

// sideEffects creates the table the testworker's step functions write
// to, and returns a function counting the rows of a task's step.
func (e *env) sideEffects() func(task int64, step string) int {
	e.t.Helper()
	_, err := e.db.Exec(fmt.Sprintf(`CREATE TABLE %s.e2e_side_effects (id bigserial PRIMARY KEY, run_id bigint, task_id bigint,
		step text, attempt int, pid int, detail text)`, pgtest.Schema))
	require.NoError(e.t, err)
	return func(task int64, step string) int {
		var n int
		require.NoError(e.t, e.db.QueryRow(fmt.Sprintf(`SELECT count(*) FROM %s.e2e_side_effects WHERE task_id = $1 AND step = $2`,
			pgtest.Schema), task, step).Scan(&n))
		return n
	}
}

// durableWait returns the task's row of cairn_durable_waits: its kind and
// name ("" when it has none), and whether it has one.
func (e *env) durableWait(task int64) (kind, name string, ok bool) {
	e.t.Helper()
	var n *string
	err := e.db.QueryRow(fmt.Sprintf(`SELECT kind, name FROM %s.cairn_durable_waits WHERE task_id = $1`, pgtest.Schema), task).Scan(&kind, &n)
	if err != nil {
		return "", "", false
	}
	if n != nil {
		name = *n
	}
	return kind, name, true
}

// checkWaitRescued checks that the task went deferred -> ready on a lease expiry that
// names its durable wait, without counting the rescue.
func (e *env) checkWaitRescued(tk store.Task) {
	e.t.Helper()
	rescued := false
	for _, ev := range e.events(tk.ID) {
		if ev.From != nil && *ev.From == store.StatusDeferred && ev.To == store.StatusReady && ev.Error != nil &&
			strings.Contains(*ev.Error, "durable wait") {
			rescued = true
		}
	}
	require.True(e.t, rescued, "no deferred -> ready rescue of the durable wait")
	require.Zero(e.t, tk.Rescues, "the rescue of a durable wait is not counted")
}

// testSigkillDuringSleepReplaysSteps: a task journals step one, sleeps
// durably, then runs steps two and three. Its worker is SIGKILLed during
// the sleep; the survivor's next attempt does not run step one's function
// again, keeps the journaled wake time, and completes.
func testSigkillDuringSleepReplaysSteps(t *testing.T, bin string) {
	e := newEnv(t, bin)
	count := e.sideEffects()
	a := e.startWorker("a")
	run := e.enqueue("park", 1, input{Mode: "steps", SleepMs: (5 * time.Second).Milliseconds()})[0]
	var tk store.Task
	waitFor(t, 20*time.Second, "the task to sleep durably", func() bool {
		tk = e.task(run, "work")
		kind, _, ok := e.durableWait(tk.ID)
		return ok && kind == store.WaitKindSleep
	})
	require.Equal(t, 1, count(tk.ID, "one"))
	journal, err := e.st.TaskStepList(context.Background(), tk.ID)
	require.NoError(t, err)
	a.kill()
	b := e.startWorker("b")

	require.Equal(t, store.RunCompleted, e.waitRun(run, lease+rescue+30*time.Second))
	tk = e.task(run, "work")
	require.Equal(t, 2, tk.Attempt, "the killed attempt and the survivor's")
	require.Equal(t, b.id, e.completedBy(tk.ID))
	e.checkWaitRescued(tk)
	require.Equal(t, 1, count(tk.ID, "one"), "step one's function ran once, on a")
	require.Equal(t, 1, count(tk.ID, "two"))
	require.Equal(t, 1, count(tk.ID, "three"))
	after, err := e.st.TaskStepList(context.Background(), tk.ID)
	require.NoError(t, err)
	byName := map[string]store.Step{}
	for _, s := range after {
		byName[s.Name] = s
	}
	for _, s := range journal {
		require.JSONEq(t, string(s.Result), string(byName[s.Name].Result), "journaled %s kept as it was", s.Name)
	}
	require.Equal(t, 1, byName["cairn:sleep#1"].Attempt, "the wake time is the first attempt's")
	require.Equal(t, 2, byName["three"].Attempt)
	_, _, waiting := e.durableWait(tk.ID)
	require.False(t, waiting)
}

// testSignalsReceivedOnceAcrossSigkill: signal "a" is sent before any
// worker runs the task, signal "b" while the worker waiting for it is
// dead. The task receives each once: a's payload comes back from the
// journal on the next attempt, b's is taken by it.
func testSignalsReceivedOnceAcrossSigkill(t *testing.T, bin string) {
	e := newEnv(t, bin)
	count := e.sideEffects()
	run := e.enqueue("park", 1, input{Mode: "signals"})[0]
	tk := e.task(run, "work")
	admin := e.adminEngine(false)
	ctx := context.Background()
	require.NoError(t, admin.SendSignal(ctx, tk.ID, "a", map[string]int{"n": 1}))

	a := e.startWorker("a")
	waitFor(t, 20*time.Second, `the task to wait for signal "b"`, func() bool {
		kind, name, ok := e.durableWait(tk.ID)
		return ok && kind == store.WaitKindSignal && name == "b"
	})
	require.Equal(t, 1, count(tk.ID, "got-a"))
	a.kill()
	require.NoError(t, admin.SendSignal(ctx, tk.ID, "b", map[string]int{"n": 2}))
	b := e.startWorker("b")

	require.Equal(t, store.RunCompleted, e.waitRun(run, lease+rescue+30*time.Second))
	tk = e.task(run, "work")
	require.Equal(t, 2, tk.Attempt)
	require.Equal(t, b.id, e.completedBy(tk.ID))
	e.checkWaitRescued(tk)
	require.JSONEq(t, `{"a": {"n": 1}, "b": {"n": 2}}`, string(tk.Output))
	require.Equal(t, 1, count(tk.ID, "got-a"), "a was received once")
	require.Equal(t, 1, count(tk.ID, "got-b"), "b was received once")
	sigs, err := e.st.SignalListByTask(ctx, tk.ID)
	require.NoError(t, err)
	require.Len(t, sigs, 2)
	consumedBy := map[string]int{}
	for _, s := range sigs {
		require.NotNil(t, s.ConsumedAt, "signal %s taken", s.Name)
		consumedBy[s.Name] = *s.ConsumedAttempt
	}
	require.Equal(t, map[string]int{"a": 1, "b": 2}, consumedBy)
	var journaled struct {
		Signal int64 `json:"signal"`
	}
	steps, err := e.st.TaskStepList(ctx, tk.ID)
	require.NoError(t, err)
	for _, s := range steps {
		if s.Name == "cairn:signal#1" {
			require.NoError(t, json.Unmarshal(s.Result, &journaled))
		}
	}
	require.Equal(t, sigs[0].ID, journaled.Signal, "the first wait journaled signal a")
}

// childRuns returns the runs spawned by a task, oldest first.
func (e *env) childRuns(task int64) []int64 {
	e.t.Helper()
	rows, err := e.db.Query(fmt.Sprintf(`SELECT id FROM %s.runs WHERE parent_task_id = $1 ORDER BY id`, pgtest.Schema), task)
	require.NoError(e.t, err)
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(e.t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(e.t, rows.Err())
	return ids
}

// testFanOutSpawnsEachChildOnceAcrossSigkill: a parent spawns 200 child
// runs on workers of 4 slots and awaits them. Its worker is SIGKILLed
// half-way through the spawns; the survivor's next attempt replays the
// journaled spawns (no second run for any of them), spawns the rest,
// waits without a slot and completes. No worker ever ran more than 4
// tasks (from task_events and from sampled committed states).
func testFanOutSpawnsEachChildOnceAcrossSigkill(t *testing.T, bin string) {
	const children, pauseAt = 200, 100
	e := newEnv(t, bin)
	over := e.watchSlots()
	a := e.startWorker("a", "-slots", "4")
	run := e.enqueue("requeue", 1, input{Mode: "fanout", Children: children, PauseAt: pauseAt, SleepMs: 5})[0]
	parent := e.task(run, "work")
	waitFor(t, 30*time.Second, "half the children to be spawned", func() bool { return len(e.childRuns(parent.ID)) == pauseAt })
	a.kill()
	e.openGate("gate-spawn")
	e.startWorker("b", "-slots", "4")

	require.Equal(t, store.RunCompleted, e.waitRun(run, lease+rescue+120*time.Second))
	parent = e.task(run, "work")
	require.Equal(t, 2, parent.Attempt, "the killed attempt and the survivor's")
	require.JSONEq(t, fmt.Sprintf(`{"children": %d, "completed": %d}`, children, children), string(parent.Output))

	kids := e.childRuns(parent.ID)
	require.Len(t, kids, children, "each child spawned once")
	journal, err := e.st.TaskStepList(context.Background(), parent.ID)
	require.NoError(t, err)
	spawned := map[int64]string{}
	for _, s := range journal {
		if !strings.HasPrefix(s.Name, "cairn:spawn/") {
			continue
		}
		var r store.SpawnResult
		require.NoError(t, json.Unmarshal(s.Result, &r))
		require.NotContains(t, spawned, r.Run, "run %d journaled twice", r.Run)
		spawned[r.Run] = s.Name
		want := 1
		if n, _ := strconv.Atoi(strings.TrimPrefix(s.Name, "cairn:spawn/c")); n >= pauseAt {
			want = 2
		}
		require.Equal(t, want, s.Attempt, "spawn %s journaled by attempt %d", s.Name, s.Attempt)
	}
	require.Len(t, spawned, children)
	for _, id := range kids {
		require.Contains(t, spawned, id, "child run %d is journaled", id)
		require.Equal(t, store.RunCompleted, e.run(id).Status)
	}

	events := e.runEvents(run)
	for _, id := range kids {
		events = append(events, e.runEvents(id)...)
	}
	peak := maxRunning(events)
	t.Logf("peak running per worker: %v", peak)
	for w, n := range peak {
		require.LessOrEqual(t, n, 4, "worker %d ran more tasks than its slots", w)
	}
	require.Zero(t, over(), "a committed state showed a worker with more running tasks than slots")
}
