package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// TestWithAfterFollowsTriggerRuleAcrossSigkill: runs C and D are enqueued
// WithAfter(A, B), C under OneFailed and D under the default AllSuccess.
// A completes on worker a; a is SIGKILLed while B's task runs, and B
// fails permanently on worker b. The count-down of C and D survives the
// crash: C runs (one awaited run failed) and D's tasks are skipped.
func TestWithAfterFollowsTriggerRuleAcrossSigkill(t *testing.T) {
	t.Parallel()
	e := newEnv(t, buildTestworker(t))
	a := e.startWorker("a")
	runA := e.enqueue("requeue", 1, input{Mode: "quick"})[0]
	runB := e.enqueue("requeue", 1, input{Mode: "fail"})[0]
	after := "-after=" + strconv.FormatInt(runA, 10) + "," + strconv.FormatInt(runB, 10)
	runC := e.enqueueWith("requeue", input{Mode: "quick"}, after, "-after-rule=one_failed")
	runD := e.enqueueWith("requeue", input{Mode: "quick"}, after)

	require.Equal(t, store.RunCompleted, e.waitRun(runA, 30*time.Second))
	waitFor(t, 30*time.Second, "B's task to run on a", func() bool {
		tk := e.task(runB, "work")
		return tk.Status == store.StatusRunning
	})
	for _, run := range []int64{runC, runD} {
		root := e.task(run, "work")
		require.Equal(t, store.StatusNotStarted, root.Status, "run %d still waits for B", run)
		require.Equal(t, 1, root.PendingDeps, "run %d counted A down", run)
	}
	a.kill()
	b := e.startWorker("b")
	e.openGate("gate-run-" + strconv.FormatInt(runB, 10))

	require.Equal(t, store.RunFailed, e.waitRun(runB, lease+rescue+30*time.Second))
	failedOnB := false
	for _, ev := range e.events(e.task(runB, "work").ID) {
		failedOnB = failedOnB || ev.To == store.StatusFailed && ev.WorkerID != nil && *ev.WorkerID == b.id
	}
	require.True(t, failedOnB, "B failed on the survivor, after a's death")
	require.Equal(t, store.RunCompleted, e.waitRun(runC, 30*time.Second))
	for _, tk := range e.tasks(runC) {
		require.Equal(t, store.StatusCompleted, tk.Status, "C's task %s runs: one awaited run failed", tk.Name)
	}
	require.Equal(t, b.id, e.completedBy(e.task(runC, "work").ID))
	require.Equal(t, 1, e.markers("start", e.task(runC, "work").ID, 0), "C's root ran once")
	e.waitRun(runD, 30*time.Second)
	for _, tk := range e.tasks(runD) {
		require.Equal(t, store.StatusSkipped, tk.Status, "D's task %s is skipped: not all awaited runs succeeded", tk.Name)
		require.Zero(t, e.markers("start", tk.ID, 0), "D's task %s never ran", tk.Name)
	}
	deps, err := e.st.RunDepList(t.Context(), runC)
	require.NoError(t, err)
	require.Equal(t, []store.RunDep{
		{AfterRunID: runA, Status: store.RunCompleted, Finished: true},
		{AfterRunID: runB, Status: store.RunFailed, Finished: true},
	}, deps)
}

// enqueueWith starts one run of workflow through a testworker process
// with extra flags (-after, -after-rule) and returns its id.
func (e *env) enqueueWith(workflow string, in input, args ...string) int64 {
	e.t.Helper()
	in.Dir = e.dir
	b, err := json.Marshal(in)
	require.NoError(e.t, err)
	args = append([]string{"-db", e.url, "-enqueue", workflow, "-input", string(b)}, args...)
	cmd := exec.Command(e.bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(e.t, err, "enqueue: %s", stderr.String())
	id, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(string(out)), "RUN "), 10, 64)
	require.NoError(e.t, err, "enqueue output %q", out)
	return id
}
