package engine_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

func TestDiamondRunsInOrderWithMergedOutputs(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	var mu sync.Mutex
	var order []string
	step := func(name string, out map[string]any) engine.Handler {
		return func(ctx context.Context, h *engine.TaskHandle) error {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			var in map[string]any
			if err := h.Input(&in); err != nil {
				return err
			}
			res := map[string]any{"seen_" + name: in}
			for k, v := range out {
				res[k] = v
			}
			return h.SetOutput(res)
		}
	}
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "diamond", Tasks: []engine.Task{
		{Name: "a", Run: step("a", map[string]any{"from": "a", "a": 1})},
		{Name: "b", Deps: []string{"a"}, Run: step("b", map[string]any{"from": "b", "b": 2})},
		{Name: "c", Deps: []string{"a"}, Run: step("c", map[string]any{"from": "c", "c": 3})},
		{Name: "d", Deps: []string{"b", "c"}, Run: step("d", nil)},
	}}))
	start(t, e.eng)
	run, err := e.eng.Enqueue(context.Background(), "diamond", map[string]any{"input": true, "from": "input"})
	require.NoError(t, err)
	final := waitRun(t, e.st, run.ID, 20*time.Second)
	require.Equal(t, store.RunCompleted, final.Status)

	mu.Lock()
	require.Equal(t, "a", order[0])
	require.Equal(t, "d", order[3])
	mu.Unlock()

	d := taskByName(t, e.st, run.ID, "d")
	var out map[string]map[string]any
	require.NoError(t, json.Unmarshal(d.Output, &out))
	seen := out["seen_d"]
	require.Equal(t, true, seen["input"])
	_, hasA := seen["a"]
	require.False(t, hasA, "only direct dependencies are merged")
	require.EqualValues(t, 1, seen["seen_b"].(map[string]any)["a"], "b saw a's output")
	require.EqualValues(t, 2, seen["b"])
	require.EqualValues(t, 3, seen["c"])
	// c is declared after b in d's deps, so c wins the "from" clash.
	require.Equal(t, "c", seen["from"])
}
