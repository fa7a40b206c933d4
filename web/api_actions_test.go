package web_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/web"
)

// TestAPIRunTaskAndScheduleActions drives the run, task and schedule
// actions through the JSON API (the site's forms are tested elsewhere):
// each answers 200 with the action's message and changes the state.
func TestAPIRunTaskAndScheduleActions(t *testing.T) {
	t.Parallel()
	e := setup(t, func(ec *engine.Config, _ *web.Config) {
		ec.NoWorker = true
		ec.Schedules = []engine.Schedule{{Name: "hourly", Expression: "@hourly", Workflow: "wf"}}
	})
	ctx := context.Background()
	c := e.loggedIn(t, adminPW)
	post := func(path, wantMsg string) {
		t.Helper()
		res, body := c.postJSON(path, "")
		require.Equal(t, http.StatusOK, res.StatusCode, "POST %s: %s", path, body)
		require.Contains(t, body, wantMsg)
	}

	runID := e.enqueue(t, nil)
	post(fmt.Sprintf("/api/runs/%d/pause", runID), "paused")
	e.waitRun(t, runID, store.RunPaused)
	post(fmt.Sprintf("/api/runs/%d/resume", runID), "resumed")
	e.waitRun(t, runID, store.RunPending)
	post(fmt.Sprintf("/api/runs/%d/cancel", runID), "cancelled")
	e.waitRun(t, runID, store.RunCancelled)

	runID = e.enqueue(t, nil)
	a := e.task(t, runID, "a")
	post(fmt.Sprintf("/api/tasks/%d/cancel", a.ID), "cancelled")
	require.Equal(t, store.StatusCancelled, e.task(t, runID, "a").Status)

	post("/api/schedules/hourly/pause", "paused")
	sc, err := e.st.ScheduleGet(ctx, "hourly")
	require.NoError(t, err)
	require.True(t, sc.Paused)
	post("/api/schedules/hourly/resume", "resumed")
	sc, err = e.st.ScheduleGet(ctx, "hourly")
	require.NoError(t, err)
	require.False(t, sc.Paused)

	// Requeue needs an interrupted task: a second engine runs one that
	// outlives its shutdown grace (and does not requeue on interrupt).
	started := make(chan struct{}, 1)
	eng2, err := engine.New(e.db.SQL, engine.Config{Logger: testLogger(t), PollInterval: 100 * time.Millisecond, ShutdownGrace: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, eng2.Register(engine.Workflow{Name: "hang", Tasks: []engine.Task{
		{Name: "h", Run: func(ctx context.Context, _ *engine.TaskHandle) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}},
	}}))
	require.NoError(t, eng2.Start(ctx))
	run, err := eng2.Enqueue(ctx, "hang", nil)
	require.NoError(t, err)
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("the task never started")
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_ = eng2.Shutdown(sctx)
	h := e.task(t, run.ID, "h")
	require.Equal(t, store.StatusInterrupted, h.Status)
	post(fmt.Sprintf("/api/tasks/%d/requeue", h.ID), "requeued")
	require.Equal(t, store.StatusReady, e.task(t, run.ID, "h").Status)
}
