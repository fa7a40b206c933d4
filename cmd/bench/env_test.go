package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
)

// The flat DAG has the fan's ten tasks, none of them with a dependency:
// it measures a run of ten tasks without what dependencies cost.
func TestFanWorkflowFlatKeepsTheTasksAndDropsTheDependencies(t *testing.T) {
	h := func(context.Context, *engine.TaskHandle) error { return nil }
	fan, flat := fanWorkflow("fan", h, false), fanWorkflow("fan", h, true)
	require.Len(t, fan.Tasks, 10)
	require.Len(t, flat.Tasks, 10)
	deps := 0
	for i := range fan.Tasks {
		require.Equal(t, fan.Tasks[i].Name, flat.Tasks[i].Name)
		require.Empty(t, flat.Tasks[i].Deps, flat.Tasks[i].Name)
		deps += len(fan.Tasks[i].Deps)
	}
	require.Equal(t, 16, deps, "8 on the root, 8 of the join")
}
