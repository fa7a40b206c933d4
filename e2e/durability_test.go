package e2e

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// Timings every worker process of these tests runs with (the testworker's
// defaults): a dead worker's tasks are rescued within lease + rescue.
const (
	lease     = 2 * time.Second
	heartbeat = 300 * time.Millisecond
	rescue    = 300 * time.Millisecond
	grace     = 3 * time.Second
)

// TestDurability kills, stops and disconnects real worker processes (the
// program in internal/testworker) and checks what DESIGN.md promises in
// "Deferral", "Leases, orphans, timeouts" and "Graceful shutdown and
// pending requeue". The worker is built once; the cases run in parallel,
// each on its own database.
func TestDurability(t *testing.T) {
	t.Parallel()
	bin := buildTestworker(t)
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, bin string)
	}{
		{"SigkillRequeuesOrParks", testSigkillRequeuesOrParks},
		{"SigtermAppliesShutdownTable", testSigtermAppliesShutdownTable},
		{"SigtermMidStreamLeavesNothingRunning", testSigtermMidStreamLeavesNothingRunning},
		{"PostgresRestart", testPostgresRestart},
		{"DeferredTasksHoldNoSlot", testDeferredTasksHoldNoSlot},
		{"SignalWakesDeferredTask", testSignalWakesDeferredTask},
		{"CheckpointSurvivesSigkill", testCheckpointSurvivesSigkill},
		{"OneTaskRunsReadFromOutside", testOneTaskRunsReadFromOutside},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, bin)
		})
	}
}

// testSigkillRequeuesOrParks: SIGKILL a worker in the middle of four
// tasks; the surviving worker's rescuer applies the interrupt rule once the
// lease runs out: RequeueOnInterrupt tasks run again there (attempt 2),
// the others are parked as interrupted until an admin requeues them.
// Ready tasks are untouched. Nothing is lost.
func testSigkillRequeuesOrParks(t *testing.T, bin string) {
	e := newEnv(t, bin)
	a := e.startWorker("a")
	requeued := e.enqueue("requeue", 2, input{Mode: "block"})
	parked := e.enqueue("park", 2, input{Mode: "block"})
	blocked := slices.Concat(requeued, parked)
	waitFor(t, 20*time.Second, "four handlers running on worker a", func() bool {
		for _, run := range blocked {
			tk := e.task(run, "work")
			if tk.Status != store.StatusRunning || e.markers("start", tk.ID, 1) != 1 {
				return false
			}
			require.Equal(t, a.id, *tk.WorkerID)
		}
		return true
	})
	// All four slots of a are taken: these stay ready until b starts.
	waiting := e.enqueue("requeue", 2, input{Mode: "quick"})
	for _, run := range waiting {
		require.Equal(t, store.StatusReady, e.task(run, "work").Status)
	}
	b := e.startWorker("b")

	killed := time.Now()
	a.kill()
	e.openGate("gate-all") // a is dead: only b's attempts can pass

	rescuedAt := map[int64]time.Time{}
	waitFor(t, lease+rescue+10*time.Second, "the rescuer to apply the interrupt rule", func() bool {
		for _, run := range blocked {
			tk := e.task(run, "work")
			for _, ev := range e.events(tk.ID) {
				if ev.From != nil && *ev.From == store.StatusRunning && ev.Error != nil &&
					strings.Contains(*ev.Error, "lease expired") {
					rescuedAt[tk.ID] = ev.At
				}
			}
		}
		return len(rescuedAt) == len(blocked)
	})
	for id, at := range rescuedAt {
		after := at.Sub(killed)
		t.Logf("task %d rescued %s after SIGKILL", id, after.Round(time.Millisecond))
		// The lease was renewed at most one heartbeat before the kill, and
		// the rescuer looks every RescueInterval.
		require.GreaterOrEqual(t, after, lease/2, "task %d rescued before its lease could expire", id)
		require.LessOrEqual(t, after, lease+rescue+2*time.Second, "task %d rescued too late", id)
	}

	for _, run := range requeued {
		require.Equal(t, store.RunCompleted, e.waitRun(run, 20*time.Second))
		tk := e.task(run, "work")
		require.Equal(t, 2, tk.Attempt, "requeued task counts the killed attempt")
		require.Equal(t, 1, tk.Rescues)
		require.Equal(t, 1, e.markers("start", tk.ID, 1), "attempt 1 ran on a")
		require.Equal(t, 1, e.markers("start", tk.ID, 2), "attempt 2 ran on b")
		require.Equal(t, b.id, e.completedBy(tk.ID), "the survivor completed it")
	}
	for _, run := range parked {
		tk := e.task(run, "work")
		require.Equal(t, store.StatusInterrupted, tk.Status)
		require.Equal(t, 1, tk.Attempt)
		require.Equal(t, 1, tk.Rescues)
		require.Equal(t, store.StatusNotStarted, e.task(run, "after").Status)
		require.Equal(t, store.RunInterrupted, e.run(run).Status)
	}
	for _, run := range waiting {
		require.Equal(t, store.RunCompleted, e.waitRun(run, 20*time.Second))
		require.Equal(t, 1, e.task(run, "work").Attempt)
	}
	// The rescuer marks a lost in the pass that rescued its tasks, just
	// after their commit.
	waitFor(t, rescue+5*time.Second, "worker a to be marked lost", func() bool { return e.worker(a.id).Status == "lost" })

	// An admin requeues the parked tasks; they run on b.
	admin := e.adminEngine(false)
	for _, run := range parked {
		require.NoError(t, admin.RequeueTask(context.Background(), e.task(run, "work").ID))
	}
	for _, run := range parked {
		require.Equal(t, store.RunCompleted, e.waitRun(run, 20*time.Second))
		require.Equal(t, 2, e.task(run, "work").Attempt)
	}
	e.checkNoDuplicates(slices.Concat(blocked, waiting))
}

// testSigtermAppliesShutdownTable: SIGTERM a worker holding running and
// deferred tasks of both kinds, with ready and not_started tasks waiting.
// Within the grace period a handler that finishes completes normally; at
// its end the rest follow the shutdown table; the worker row is stopped
// and the process exits 0. A new worker then runs what was requeued or
// waiting, and leaves the parked tasks parked.
func testSigtermAppliesShutdownTable(t *testing.T, bin string) {
	e := newEnv(t, bin)
	a := e.startWorker("a", "-slots", "3", "-grace", grace.String())

	deferredRequeue := e.enqueue("requeue", 1, input{Mode: "defer"})[0]
	deferredPark := e.enqueue("park", 1, input{Mode: "defer"})[0]
	waitFor(t, 20*time.Second, "two tasks deferred", func() bool {
		return e.task(deferredRequeue, "work").Status == store.StatusDeferred &&
			e.task(deferredPark, "work").Status == store.StatusDeferred
	})
	runningRequeue := e.enqueue("requeue", 1, input{Mode: "block"})[0]
	runningPark := e.enqueue("park", 1, input{Mode: "block"})[0]
	finishing := e.enqueue("park", 1, input{Mode: "block"})[0]
	running := []int64{runningRequeue, runningPark, finishing}
	waitFor(t, 20*time.Second, "three handlers running", func() bool {
		for _, run := range running {
			tk := e.task(run, "work")
			if tk.Status != store.StatusRunning || e.markers("start", tk.ID, 1) != 1 {
				return false
			}
		}
		return true
	})
	// Every slot is taken (deferred tasks hold none): these stay ready.
	readyRequeue := e.enqueue("requeue", 1, input{Mode: "quick"})[0]
	readyPark := e.enqueue("park", 1, input{Mode: "quick"})[0]
	for _, run := range []int64{readyRequeue, readyPark} {
		require.Equal(t, store.StatusReady, e.task(run, "work").Status)
	}

	termed := time.Now()
	a.signal(syscall.SIGTERM)
	// The row says stopping first; the log line follows once claims stopped.
	waitFor(t, 5*time.Second, "worker a to stop claiming", func() bool {
		return e.worker(a.id).Status == "stopping" && strings.Contains(a.stderr.String(), `msg="engine shutting down"`)
	})
	// This handler now finishes inside the grace period.
	e.openGate(fmt.Sprintf("gate-run-%d", finishing))
	exitErr := a.wait(grace + 15*time.Second)
	took := time.Since(termed)
	t.Logf("worker exited %s after SIGTERM (grace %s)", took.Round(time.Millisecond), grace)
	require.NoError(t, exitErr, "worker must exit 0 after SIGTERM")
	require.True(t, a.saw("STOPPED"), "worker did not report a clean shutdown")
	require.GreaterOrEqual(t, took, grace-100*time.Millisecond, "handlers still running: shutdown must wait out the grace period")
	require.LessOrEqual(t, took, grace+4*time.Second, "shutdown overran the grace period")

	w := e.worker(a.id)
	require.Equal(t, "stopped", w.Status)
	require.NotNil(t, w.StoppedAt)

	fin := e.task(finishing, "work")
	require.Equal(t, store.StatusCompleted, fin.Status, "a handler that finishes within the grace period completes")
	require.Equal(t, 1, e.markers("done", fin.ID, 1))
	require.Equal(t, store.StatusReady, e.task(finishing, "after").Status, "no claims during shutdown")

	for _, c := range []struct {
		run        int64
		from, want string
	}{
		{runningRequeue, store.StatusRunning, store.StatusReady},
		{deferredRequeue, store.StatusDeferred, store.StatusReady},
		{runningPark, store.StatusRunning, store.StatusInterrupted},
		{deferredPark, store.StatusDeferred, store.StatusInterrupted},
	} {
		tk := e.task(c.run, "work")
		require.Equal(t, c.want, tk.Status, "task %d was %s at shutdown", tk.ID, c.from)
		require.Equal(t, 1, tk.Attempt, "the interrupted attempt is counted")
		evs := e.events(tk.ID)
		last := evs[len(evs)-1]
		require.Equal(t, c.from, *last.From)
		require.Equal(t, c.want, last.To)
		require.Equal(t, a.id, *last.WorkerID)
		require.Equal(t, store.StatusNotStarted, e.task(c.run, "after").Status)
	}
	for _, run := range []int64{readyRequeue, readyPark} {
		tk := e.task(run, "work")
		require.Equal(t, store.StatusReady, tk.Status, "ready tasks stay")
		require.Equal(t, 0, tk.Attempt)
		require.Equal(t, store.StatusNotStarted, e.task(run, "after").Status)
	}

	// A new worker picks up what was requeued or waiting.
	e.openGate("gate-all")
	b := e.startWorker("b")
	for _, run := range []int64{runningRequeue, deferredRequeue, readyRequeue, readyPark, finishing} {
		require.Equal(t, store.RunCompleted, e.waitRun(run, 20*time.Second), "run %d", run)
	}
	require.Equal(t, 2, e.task(runningRequeue, "work").Attempt)
	require.Equal(t, 2, e.task(deferredRequeue, "work").Attempt)
	for _, run := range []int64{runningPark, deferredPark} {
		require.Equal(t, store.StatusInterrupted, e.task(run, "work").Status, "parked tasks wait for an admin")
	}
	// With nothing running, a second shutdown is immediate.
	termed = time.Now()
	b.signal(syscall.SIGTERM)
	require.NoError(t, b.wait(grace+15*time.Second))
	require.Less(t, time.Since(termed), grace, "idle worker waited for the grace period")
	require.Equal(t, "stopped", e.worker(b.id).Status)
	e.checkNoDuplicates([]int64{runningRequeue, deferredRequeue, runningPark, deferredPark, finishing, readyRequeue, readyPark})
}

// testSigtermMidStreamLeavesNothingRunning: SIGTERM a worker while it
// claims and finishes short tasks as fast as it can, round after round.
// After each clean exit no task may still be held (running or deferred) by
// the stopped worker: what it had not started is still ready and runs
// later, also without RequeueOnInterrupt. A last worker then finishes
// everything, each task exactly once. The race it looks for (a claim in
// flight as Shutdown finishes) is narrow, hence the rounds.
func testSigtermMidStreamLeavesNothingRunning(t *testing.T, bin string) {
	e := newEnv(t, bin)
	runs := slices.Concat(e.enqueue("requeue", 600, input{Mode: "quick"}), e.enqueue("park", 600, input{Mode: "quick"}))
	for round := range 15 {
		w := e.startWorker(fmt.Sprintf("w%d", round), "-slots", "8")
		target := e.countMarkers("done") + 60
		waitFor(t, 20*time.Second, "the worker to finish 60 tasks", func() bool { return e.countMarkers("done") >= target })
		w.signal(syscall.SIGTERM)
		require.NoError(t, w.wait(grace+15*time.Second))
		held := e.heldBy(w.id)
		for _, tk := range held {
			t.Errorf("round %d: task %d still %s (attempt %d, %d handler starts) under stopped worker %d",
				round, tk.ID, tk.Status, tk.Attempt, e.markers("start", tk.ID, tk.Attempt), w.id)
		}
		if len(held) > 0 {
			t.FailNow()
		}
	}
	e.startWorker("last", "-slots", "8")
	for _, run := range runs {
		require.Equal(t, store.RunCompleted, e.waitRun(run, 60*time.Second), "run %d", run)
	}
	e.checkNoDuplicates(runs)
}

// testPostgresRestart: restart the PostgreSQL server (a private cluster of
// this test) while handlers run and finish; the workers reconnect and
// every task completes exactly once.
func testPostgresRestart(t *testing.T, bin string) {
	ctx := context.Background()
	cluster, url, db := startPrivateCluster(t)
	e := newEnvOn(t, bin, db, url)

	// The lease outlives the outage: tasks in flight are not rescued (that
	// would be a correct second attempt, but here we check exactly once).
	a := e.startWorker("a", "-slots", "2", "-lease", "15s")
	b := e.startWorker("b", "-slots", "2", "-lease", "15s")
	runs := e.enqueue("requeue", 6, input{Mode: "block"})
	waitFor(t, 20*time.Second, "four handlers running", func() bool {
		return e.countMarkers("start") == 4
	})

	restarted := make(chan error, 1)
	go func() { restarted <- cluster.Restart(ctx) }()
	var restartErr error
	done := false
	wentDown := false
	waitFor(t, 90*time.Second, "the server to go down", func() bool {
		select {
		case restartErr = <-restarted:
			done = true
			return true
		default:
		}
		wentDown = !reachable(url)
		return wentDown
	})
	// Handlers finish while the server is down (or just back): their
	// completions wait in the worker until the database answers again.
	e.openGate("gate-all")
	if !done {
		select {
		case restartErr = <-restarted:
		case <-time.After(90 * time.Second):
			t.Fatal("restart did not finish")
		}
	}
	require.NoError(t, restartErr)
	t.Logf("gate opened while the server was down: %v", wentDown)

	for _, run := range runs {
		require.Equal(t, store.RunCompleted, e.waitRun(run, 60*time.Second), "run %d", run)
	}
	for _, run := range runs {
		for _, tk := range e.tasks(run) {
			require.Equal(t, store.StatusCompleted, tk.Status)
			require.Equal(t, 1, tk.Attempt, "task %d ran more than once", tk.ID)
			require.Equal(t, 1, e.markers("start", tk.ID, 0), "task %d executions", tk.ID)
			require.Equal(t, 1, e.markers("done", tk.ID, 0), "task %d completions", tk.ID)
		}
	}
	for _, w := range []*proc{a, b} {
		require.Equal(t, "running", e.worker(w.id).Status, "worker %s heartbeats again", w.name)
		t.Logf("worker %s logged %d outages of the database", w.name,
			strings.Count(w.stderr.String(), `msg="database unreachable"`))
	}
	// Both processes are still healthy: new work after the restart runs.
	after := e.enqueue("requeue", 2, input{Mode: "quick"})
	for _, run := range after {
		require.Equal(t, store.RunCompleted, e.waitRun(run, 20*time.Second))
	}
}

// testDeferredTasksHoldNoSlot: a 4-slot worker parks 8 deferred tasks and
// still runs 8 quick runs meanwhile; replaying task_events shows it never
// ran more than 4 tasks at once. Opening the gate completes the 8.
func testDeferredTasksHoldNoSlot(t *testing.T, bin string) {
	e := newEnv(t, bin)
	a := e.startWorker("a", "-slots", "4")
	over := e.watchSlots()
	deferred := e.enqueue("requeue", 8, input{Mode: "defer", EveryMs: 100})
	waitFor(t, 20*time.Second, "8 tasks deferred", func() bool {
		for _, run := range deferred {
			if e.task(run, "work").Status != store.StatusDeferred {
				return false
			}
		}
		return true
	})
	quick := e.enqueue("requeue", 8, input{Mode: "quick"})
	for _, run := range quick {
		require.Equal(t, store.RunCompleted, e.waitRun(run, 20*time.Second), "quick run %d", run)
	}
	for _, run := range deferred {
		require.Equal(t, store.StatusDeferred, e.task(run, "work").Status, "run %d", run)
	}
	e.openGate("gate-all")
	for _, run := range deferred {
		require.Equal(t, store.RunCompleted, e.waitRun(run, 20*time.Second), "deferred run %d", run)
	}

	all := slices.Concat(deferred, quick)
	var events []store.Event
	for _, run := range all {
		events = append(events, e.runEvents(run)...)
	}
	peak := maxRunning(events)
	t.Logf("peak running per worker: %v", peak)
	require.Equal(t, []int64{a.id}, sortedKeys(peak))
	require.LessOrEqual(t, peak[a.id], 4, "worker ran more tasks than its slots")
	require.Zero(t, over(), "a committed state showed a worker with more running tasks than slots")
	e.checkNoDuplicates(all)
}

// testSignalWakesDeferredTask: a task deferred with an hour's interval
// re-checks its condition as soon as another engine (in this test
// process, without workers) signals it.
func testSignalWakesDeferredTask(t *testing.T, bin string) {
	e := newEnv(t, bin)
	e.startWorker("a")
	run := e.enqueue("requeue", 1, input{Mode: "defer", EveryMs: time.Hour.Milliseconds(), TraceCond: true})[0]
	var tk store.Task
	waitFor(t, 20*time.Second, "the task to defer", func() bool {
		tk = e.task(run, "work")
		return tk.Status == store.StatusDeferred && e.markers("cond", tk.ID, 1) == 1
	})
	admin := e.adminEngine(true)
	ctx := context.Background()

	// A signal while the condition is false: checked once more, stays.
	require.NoError(t, admin.Signal(ctx, tk.ID))
	waitFor(t, 5*time.Second, "the signal to re-check the condition", func() bool {
		return e.markers("cond", tk.ID, 1) == 2
	})
	require.Equal(t, store.StatusDeferred, e.task(run, "work").Status)

	e.openGate(fmt.Sprintf("gate-run-%d", run))
	signalled := time.Now()
	require.NoError(t, admin.Signal(ctx, tk.ID))
	require.Equal(t, store.RunCompleted, e.waitRun(run, 5*time.Second))
	t.Logf("completed %s after the signal", time.Since(signalled).Round(time.Millisecond))
	require.Equal(t, 3, e.markers("cond", tk.ID, 1), "only the signals re-checked the condition")
	require.Equal(t, 1, e.task(run, "work").Attempt)
}

// testCheckpointSurvivesSigkill: a task checkpoints, defers (keeping its
// lease alive) and its worker is SIGKILLed; the survivor rescues it and
// the next attempt reads the checkpoint back.
func testCheckpointSurvivesSigkill(t *testing.T, bin string) {
	e := newEnv(t, bin)
	a := e.startWorker("a")
	token := fmt.Sprintf("tok-%d", time.Now().UnixNano())
	run := e.enqueue("requeue", 1, input{Mode: "checkpoint", Token: token})[0]
	var first store.Task
	waitFor(t, 20*time.Second, "the task to checkpoint and defer", func() bool {
		first = e.task(run, "work")
		return first.Status == store.StatusDeferred && len(first.Checkpoint) > 0
	})
	waitFor(t, 5*time.Second, "the deferred task's lease to be renewed", func() bool {
		tk := e.task(run, "work")
		return tk.Status == store.StatusDeferred && tk.LeaseExpiresAt.After(*first.LeaseExpiresAt)
	})
	b := e.startWorker("b")
	a.kill()
	e.openGate(fmt.Sprintf("gate-run-%d", run))

	require.Equal(t, store.RunCompleted, e.waitRun(run, lease+rescue+20*time.Second))
	tk := e.task(run, "work")
	require.Equal(t, 2, tk.Attempt)
	require.Equal(t, 1, tk.Rescues)
	require.Equal(t, b.id, e.completedBy(tk.ID))
	rescued := false
	for _, ev := range e.events(tk.ID) {
		if ev.From != nil && *ev.From == store.StatusDeferred && ev.To == store.StatusReady {
			rescued = true
		}
	}
	require.True(t, rescued, "no deferred -> ready rescue event")

	starts := e.records("start", tk.ID)
	require.Len(t, starts, 2)
	slices.SortFunc(starts, func(x, y record) int { return x.Attempt - y.Attempt })
	require.Empty(t, starts[0].Checkpoint, "attempt 1 had no checkpoint")
	var cp struct {
		Token          string `json:"token"`
		SavedByAttempt int    `json:"saved_by_attempt"`
	}
	require.NoError(t, json.Unmarshal(starts[1].Checkpoint, &cp))
	require.Equal(t, token, cp.Token, "attempt 2 read back the checkpoint")
	require.Equal(t, 1, cp.SavedByAttempt)
	require.Equal(t, 0, e.markers("done", tk.ID, 1))
	require.Equal(t, 1, e.markers("done", tk.ID, 2))
}

// ---- helpers ----

// input is the run input the testworker's handlers read.
type input struct {
	Mode      string `json:"mode"`
	Dir       string `json:"dir"`
	SleepMs   int64  `json:"sleep_ms,omitempty"`
	EveryMs   int64  `json:"every_ms,omitempty"`
	TraceCond bool   `json:"trace_cond,omitempty"`
	Token     string `json:"token,omitempty"`
	Children  int    `json:"children,omitempty"`
	PauseAt   int    `json:"pause_at,omitempty"`
}

// record is one marker file the testworker wrote.
type record struct {
	Kind       string          `json:"kind"`
	TaskID     int64           `json:"task_id"`
	RunID      int64           `json:"run_id"`
	Task       string          `json:"task"`
	Attempt    int             `json:"attempt"`
	PID        int             `json:"pid"`
	Checkpoint json.RawMessage `json:"checkpoint"`
}

// buildTestworker builds internal/testworker into a directory removed when
// t (and its subtests) end.
func buildTestworker(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "testworker")
	cmd := exec.Command(goBin, "build", "-o", bin, "./internal/testworker")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build testworker:\n%s", out)
	return bin
}

// env is one test's database, marker directory and worker binary.
type env struct {
	t   *testing.T
	bin string
	url string
	db  *sql.DB
	st  *store.Store
	dir string
}

func newEnv(t *testing.T, bin string) *env {
	db := pgtest.New(t)
	return newEnvOn(t, bin, db.SQL, db.URL)
}

func newEnvOn(t *testing.T, bin string, db *sql.DB, url string) *env {
	checkTruthAtEnd(t, db)
	st, err := store.New(db, pgtest.Schema)
	require.NoError(t, err)
	return &env{t: t, bin: bin, url: url, db: db, st: st, dir: t.TempDir()}
}

// enqueue starts n runs of workflow through a testworker process and
// returns their ids.
func (e *env) enqueue(workflow string, n int, in input) []int64 {
	e.t.Helper()
	in.Dir = e.dir
	b, err := json.Marshal(in)
	require.NoError(e.t, err)
	cmd := exec.Command(e.bin, "-db", e.url, "-enqueue", workflow, "-n", strconv.Itoa(n), "-input", string(b))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(e.t, err, "enqueue: %s", stderr.String())
	var ids []int64
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		id, err := strconv.ParseInt(strings.TrimPrefix(line, "RUN "), 10, 64)
		require.NoError(e.t, err, "enqueue output %q", line)
		ids = append(ids, id)
	}
	require.Len(e.t, ids, n)
	return ids
}

// openGate creates a gate file (gate-all or gate-run-<id>) that blocked
// and deferred handlers wait for.
func (e *env) openGate(name string) {
	e.t.Helper()
	require.NoError(e.t, os.WriteFile(filepath.Join(e.dir, name), nil, 0o644))
}

// adminEngine returns an engine of this test process on the same
// database that never claims tasks (a web front end, say). With start its
// background services and LISTEN connection run too.
func (e *env) adminEngine(start bool) *engine.Engine {
	e.t.Helper()
	eng, err := engine.New(e.db, engine.Config{DatabaseURL: e.url, NoWorker: true,
		// Its rescuer must not stand in for the worker processes'.
		RescueInterval: time.Hour, LeaseDuration: lease, HeartbeatInterval: heartbeat})
	require.NoError(e.t, err)
	if start {
		require.NoError(e.t, eng.Start(context.Background()))
		e.t.Cleanup(func() { _ = eng.Shutdown(context.Background()) })
	}
	return eng
}

func (e *env) run(id int64) *store.Run {
	e.t.Helper()
	r, err := e.st.RunGet(context.Background(), id)
	require.NoError(e.t, err)
	return r
}

// waitRun waits until the run is completed, failed, cancelled or
// interrupted and returns that status.
func (e *env) waitRun(id int64, within time.Duration) string {
	e.t.Helper()
	var status string
	waitFor(e.t, within, fmt.Sprintf("run %d to finish", id), func() bool {
		// Errors are tolerated: the server may just have restarted.
		r, err := e.st.RunGet(context.Background(), id)
		if err != nil {
			return false
		}
		status = r.Status
		switch status {
		case store.RunCompleted, store.RunFailed, store.RunCancelled, store.RunInterrupted:
			return true
		}
		return false
	})
	return status
}

func (e *env) tasks(run int64) []store.Task {
	e.t.Helper()
	tasks, err := e.st.TaskListByRun(context.Background(), run)
	require.NoError(e.t, err)
	return tasks
}

func (e *env) task(run int64, name string) store.Task {
	e.t.Helper()
	for _, tk := range e.tasks(run) {
		if tk.Name == name {
			return tk
		}
	}
	e.t.Fatalf("run %d has no task %q", run, name)
	return store.Task{}
}

func (e *env) events(task int64) []store.Event {
	e.t.Helper()
	evs, err := e.st.EventListByTask(context.Background(), task)
	require.NoError(e.t, err)
	return evs
}

func (e *env) runEvents(run int64) []store.Event {
	e.t.Helper()
	evs, err := e.st.EventListByRun(context.Background(), run)
	require.NoError(e.t, err)
	return evs
}

// watchSlots samples cairn_worker_slots (one statement: one committed
// state) until the returned function is called, which returns the most
// running tasks over its slots that any worker showed (0: never over).
func (e *env) watchSlots() func() int {
	e.t.Helper()
	stop, done := make(chan struct{}), make(chan int, 1)
	go func() {
		worst := 0
		tick := time.NewTicker(2 * time.Millisecond) // sampling interval
		defer tick.Stop()
		for {
			var n int
			if err := e.db.QueryRow(`SELECT coalesce(max(running - slots), 0) FROM ` + pgtest.Schema + `.cairn_worker_slots`).Scan(&n); err == nil {
				worst = max(worst, n)
			}
			select {
			case <-stop:
				done <- worst
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	var worst int
	stopFn := func() int {
		once.Do(func() { close(stop); worst = <-done })
		return worst
	}
	e.t.Cleanup(func() { stopFn() })
	return stopFn
}

// heldBy returns the running or deferred tasks held by worker. (The store
// has no query for it; this one test reads the table directly.)
func (e *env) heldBy(worker int64) []store.Task {
	e.t.Helper()
	rows, err := e.db.Query(`SELECT id, status, attempt FROM `+pgtest.Schema+`.tasks
		WHERE worker_id = $1 AND status IN ('running', 'deferred') ORDER BY id`, worker)
	require.NoError(e.t, err)
	defer rows.Close()
	var out []store.Task
	for rows.Next() {
		var tk store.Task
		require.NoError(e.t, rows.Scan(&tk.ID, &tk.Status, &tk.Attempt))
		out = append(out, tk)
	}
	require.NoError(e.t, rows.Err())
	return out
}

// completedBy returns the worker that completed the task.
func (e *env) completedBy(task int64) int64 {
	e.t.Helper()
	for _, ev := range e.events(task) {
		if ev.To == store.StatusCompleted {
			require.NotNil(e.t, ev.WorkerID)
			return *ev.WorkerID
		}
	}
	e.t.Fatalf("task %d has no completed event", task)
	return 0
}

func (e *env) worker(id int64) store.Worker {
	e.t.Helper()
	ws, err := e.st.WorkerList(context.Background(), 1000)
	require.NoError(e.t, err)
	for _, w := range ws {
		if w.ID == id {
			return w
		}
	}
	e.t.Fatalf("no worker %d", id)
	return store.Worker{}
}

// markerKey is what a marker file's name says: <kind>-<task>-<attempt>-...
type markerKey struct {
	task    int64
	attempt int
}

// markerKeys lists the markers of kind by their names alone.
func (e *env) markerKeys(kind string) []markerKey {
	e.t.Helper()
	entries, err := os.ReadDir(e.dir)
	require.NoError(e.t, err)
	var out []markerKey
	for _, ent := range entries {
		rest, ok := strings.CutPrefix(ent.Name(), kind+"-")
		if !ok || !strings.HasSuffix(rest, ".json") {
			continue
		}
		f := strings.SplitN(rest, "-", 3)
		require.Len(e.t, f, 3, "marker name %s", ent.Name())
		task, err1 := strconv.ParseInt(f[0], 10, 64)
		attempt, err2 := strconv.Atoi(f[1])
		require.NoError(e.t, errors.Join(err1, err2), "marker name %s", ent.Name())
		out = append(out, markerKey{task, attempt})
	}
	return out
}

// records reads the markers of kind for task.
func (e *env) records(kind string, task int64) []record {
	e.t.Helper()
	names, err := filepath.Glob(filepath.Join(e.dir, fmt.Sprintf("%s-%d-*.json", kind, task)))
	require.NoError(e.t, err)
	var out []record
	for _, name := range names {
		b, err := os.ReadFile(name)
		require.NoError(e.t, err)
		var r record
		require.NoError(e.t, json.Unmarshal(b, &r), "marker %s", name)
		out = append(out, r)
	}
	return out
}

// markers counts the markers of kind for task and attempt (any when 0).
func (e *env) markers(kind string, task int64, attempt int) int {
	e.t.Helper()
	n := 0
	for _, k := range e.markerKeys(kind) {
		if k.task == task && (attempt == 0 || k.attempt == attempt) {
			n++
		}
	}
	return n
}

func (e *env) countMarkers(kind string) int { return len(e.markerKeys(kind)) }

// checkNoDuplicates checks, for every task of runs, that no attempt's
// handler ran twice and that a completed task's handler finished once.
func (e *env) checkNoDuplicates(runs []int64) {
	e.t.Helper()
	starts := map[int64]map[int]int{} // task -> attempt -> handler starts
	for _, k := range e.markerKeys("start") {
		if starts[k.task] == nil {
			starts[k.task] = map[int]int{}
		}
		starts[k.task][k.attempt]++
	}
	done := map[int64]int{}
	for _, k := range e.markerKeys("done") {
		done[k.task]++
	}
	for _, run := range runs {
		for _, tk := range e.tasks(run) {
			for attempt, n := range starts[tk.ID] {
				require.LessOrEqual(e.t, attempt, tk.Attempt, "task %d ran an attempt the database does not know", tk.ID)
				require.Equal(e.t, 1, n, "task %d attempt %d ran %d times", tk.ID, attempt, n)
			}
			if tk.Status == store.StatusCompleted {
				require.Equal(e.t, 1, done[tk.ID], "completed task %d finished %d times", tk.ID, done[tk.ID])
			}
		}
	}
}

// maxRunning replays events and returns, per worker, the most tasks it
// held running at once. Entering running (claim or resume) takes a slot;
// leaving it (defer, finish, retry, interrupt, cancel) frees it.
//
// Each transaction is applied whole before measuring: its events share
// their `at` (the transaction's start time), and within one transaction
// the event ids follow the rows' lock order, not the slots' hand-over (a
// completion write that resumes task 9 and finishes tasks 13 and 15 logs
// 9's resume first). Transactions are replayed by start time: the engine
// takes a slot before it begins the transaction that fills it, and gives
// a slot back only after the transaction that frees it commits, so every
// task running after the transactions begun by time T held its own slot
// at T. Events ordered by id alone interleave transactions by when they
// inserted, which shows peaks no commit ever had.
func maxRunning(events []store.Event) map[int64]int {
	slices.SortFunc(events, func(a, b store.Event) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return int(a.ID - b.ID)
	})
	running := map[int64]map[int64]bool{}
	peak := map[int64]int{}
	for i := 0; i < len(events); {
		j := i
		for j < len(events) && events[j].At.Equal(events[i].At) {
			ev := events[j]
			j++
			if ev.WorkerID == nil {
				continue
			}
			w := *ev.WorkerID
			if running[w] == nil {
				running[w] = map[int64]bool{}
			}
			switch {
			case ev.To == store.StatusRunning:
				running[w][ev.TaskID] = true
			case ev.From != nil && *ev.From == store.StatusRunning:
				delete(running[w], ev.TaskID)
			}
		}
		for w, r := range running {
			peak[w] = max(peak[w], len(r))
		}
		i = j
	}
	return peak
}

func sortedKeys[V any](m map[int64]V) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// reachable reports whether a new connection to url answers at once.
func reachable(url string) bool {
	db, err := sql.Open("postgres", url)
	if err != nil {
		return false
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return db.PingContext(ctx) == nil
}

// waitFor polls cond every 50ms until it holds, failing t after within.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond) // poll interval of a condition with a deadline
	}
}

// proc is a running testworker process.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	id     int64 // worker id it printed
	stderr *syncBuffer
	done   chan struct{} // closed when it exited
	err    error         // its exit status, once done

	mu    sync.Mutex
	lines []string
	ready chan string
}

// startWorker starts a testworker named name (extra flags in args) and
// waits for its READY line. The process is killed when the test ends.
func (e *env) startWorker(name string, args ...string) *proc {
	e.t.Helper()
	args = append([]string{"-db", e.url, "-name", name,
		"-lease", lease.String(), "-heartbeat", heartbeat.String(), "-rescue", rescue.String(), "-grace", grace.String()}, args...)
	cmd := exec.Command(e.bin, args...)
	p := &proc{t: e.t, name: name, cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{}), ready: make(chan string, 1)}
	cmd.Stderr = p.stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(e.t, err)
	require.NoError(e.t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.lines = append(p.lines, line)
			p.mu.Unlock()
			if strings.HasPrefix(line, "READY ") {
				p.ready <- line
			}
		}
		p.err = cmd.Wait()
		close(p.done)
	}()
	e.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if e.t.Failed() {
			e.t.Logf("worker %s (pid %d) stderr:\n%s", name, cmd.Process.Pid, p.stderr.String())
		}
	})
	select {
	case line := <-p.ready:
		id, err := strconv.ParseInt(strings.TrimPrefix(line, "READY worker="), 10, 64)
		require.NoError(e.t, err, "READY line %q", line)
		p.id = id
	case <-p.done:
		e.t.Fatalf("worker %s exited before READY: %v\n%s", name, p.err, p.stderr.String())
	case <-time.After(30 * time.Second):
		e.t.Fatalf("worker %s not READY after 30s:\n%s", name, p.stderr.String())
	}
	return p
}

func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(sig))
}

// kill SIGKILLs the process and waits until it is gone.
func (p *proc) kill() {
	p.t.Helper()
	p.signal(syscall.SIGKILL)
	var exitErr *exec.ExitError
	require.ErrorAs(p.t, p.wait(10*time.Second), &exitErr)
}

// wait waits for the process to exit and returns its exit status.
func (p *proc) wait(within time.Duration) error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(within):
		p.t.Fatalf("worker %s still running after %s", p.name, within)
		return nil
	}
}

// saw reports whether the process printed a line starting with prefix.
func (p *proc) saw(prefix string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.ContainsFunc(p.lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
}

// syncBuffer is a bytes.Buffer safe for a process writer and a test reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestMaxRunningReplaysTransactionsWhole: the events of one transaction
// count as one step whatever their ids (a completion write that resumes a
// deferred task logs the resume before the completions), and a real
// excess across transactions is still found.
func TestMaxRunningReplaysTransactionsWhole(t *testing.T) {
	t.Parallel()
	w := int64(1)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ev := func(id int64, at time.Duration, task int64, from, to string) store.Event {
		e := store.Event{ID: id, TaskID: task, To: to, WorkerID: &w, At: t0.Add(at)}
		if from != "" {
			e.From = &from
		}
		return e
	}
	const R, D, C = store.StatusRunning, store.StatusDeferred, store.StatusCompleted
	base := []store.Event{
		ev(1, 0, 9, "ready", R), ev(2, 0, 13, "ready", R), ev(3, 0, 15, "ready", R), ev(4, 0, 1, "ready", R),
		ev(5, time.Millisecond, 9, R, D),
		ev(6, 2*time.Millisecond, 11, "ready", R), // 1, 11, 13, 15 running
		// One transaction (one start time): resume 9 and claim 4 for the
		// slots of 13 and 15, logged in id order, 9 first.
		ev(7, 3*time.Millisecond, 9, D, R), ev(8, 3*time.Millisecond, 13, R, C),
		ev(9, 3*time.Millisecond, 15, R, C), ev(10, 3*time.Millisecond, 4, "ready", R),
	}
	require.Equal(t, map[int64]int{w: 4}, maxRunning(slices.Clone(base)))
	// The same resume in a transaction of its own, begun before the
	// completions', is one task too many.
	over := slices.Clone(base)
	over[6].At = t0.Add(2500 * time.Microsecond)
	require.Equal(t, map[int64]int{w: 5}, maxRunning(over))
}
