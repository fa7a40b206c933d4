package engine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store/pgtest"
)

// A process that registers nothing (the site, a NoWorker engine) can
// schedule a workflow another engine registered (stored in
// workflow_versions), and fire it by hand; a workflow neither registered
// nor stored is still refused, naming the field.
func TestScheduleOfAWorkflowAnotherEngineRegistered(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ran := &ranLog{}
	versionWorker(t, db, "w", versionChain("v1", nil, "w", ran, "a", "b"))

	cfg := fastConfig(db, t)
	cfg.NoWorker = true
	site := newEngine(t, db, cfg)
	start(t, site)
	require.Empty(t, site.Workflows())
	require.NoError(t, site.CreateSchedule(ctx, engine.Schedule{Name: "nightly", Expression: "0 3 * * *", Workflow: "deploy"}))
	run, err := site.FireSchedule(ctx, "nightly")
	require.NoError(t, err)
	require.Equal(t, "deploy", run.Workflow)

	err = site.CreateSchedule(ctx, engine.Schedule{Name: "ghost", Expression: "0 3 * * *", Workflow: "nowhere"})
	require.ErrorIs(t, err, engine.ErrUnknownWorkflow)
	var se *engine.ScheduleError
	require.ErrorAs(t, err, &se)
	require.Equal(t, "workflow", se.Field)
}
