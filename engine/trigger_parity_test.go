package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// The store decides the default rule in SQL when every dependency
// completed, and asks the engine's evaluator otherwise. For every
// combination of outcomes of one to three dependencies, finishing in one
// batch or one by one, the dependent ends as evaluate, called directly on
// the same dependencies, decides; and the evaluator is asked exactly when
// the SQL fast path does not apply.
func TestDefaultRuleInSQLAgreesWithEvaluate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, nil)
	asked := 0
	st := e.st.WithEvaluator(func(rule json.RawMessage, deps []store.DepState, input json.RawMessage) (bool, error) {
		asked++
		return engine.Evaluate(rule, deps, input)
	})
	// The dependent waits in a queue of its own, so that claims from
	// "default" take only dependencies.
	require.NoError(t, st.QueueEnsure(ctx, []string{"default", "after"}))
	w, err := st.WorkerInsert(ctx, "parity", map[string]int{"default": 10})
	require.NoError(t, err)

	outcomes := []string{store.StatusCompleted, store.StatusFailed, store.StatusSkipped, store.StatusCancelled}
	var combos [][]string
	var grow func(prefix []string)
	grow = func(prefix []string) {
		if len(prefix) > 0 {
			combos = append(combos, prefix)
		}
		if len(prefix) == 3 {
			return
		}
		for _, o := range outcomes {
			grow(append(append([]string{}, prefix...), o))
		}
	}
	grow(nil)
	require.Len(t, combos, 4+16+64)

	input := json.RawMessage(`{"x": 1}`)
	seen := map[string]int{}
	for _, outs := range combos {
		for _, together := range []bool{true, false} {
			name := fmt.Sprintf("%v together=%t", outs, together)
			n := len(outs)
			p := store.RunInsertParams{Workflow: fmt.Sprintf("parity%d", n), Input: input, Queue: "default"}
			deps := make([]int, n)
			for i := range n {
				deps[i] = i
				p.Tasks = append(p.Tasks, store.TaskTemplate{Idx: i, Name: fmt.Sprintf("d%d", i), MaxAttempts: 1, MaxRescues: 1,
					Deps: []int{}, Dependents: []int{n}})
			}
			p.Tasks = append(p.Tasks, store.TaskTemplate{Idx: n, Name: "c", Queue: "after", MaxAttempts: 1, MaxRescues: 1,
				Deps: deps, Dependents: []int{}})
			res, err := st.RunInsertMany(ctx, []store.RunInsertParams{p})
			require.NoError(t, err, name)
			claimed, err := st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{10}, Lease: time.Minute})
			require.NoError(t, err, name)
			require.Len(t, claimed, n, name)
			items := make([]store.TransitionItem, n)
			for _, c := range claimed {
				items[c.Idx] = store.TransitionItem{TaskID: c.ID, To: outs[c.Idx], Attempt: c.Attempt}
			}

			before := asked
			finish := func(items ...store.TransitionItem) {
				moved, err := st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: items})
				require.NoError(t, err, name)
				require.Len(t, moved, len(items), name)
			}
			if together {
				finish(items...)
			} else {
				for _, it := range items {
					finish(it)
				}
			}

			tasks, err := st.TaskListByRun(ctx, res[0].ID)
			require.NoError(t, err, name)
			require.Len(t, tasks, n+1, name)
			var states []store.DepState
			allCompleted := true
			for _, tk := range tasks[:n] {
				require.Equal(t, outs[tk.Idx], tk.Status, name)
				states = append(states, store.DepState{Idx: tk.Idx, Name: tk.Name, Status: tk.Status, Output: tk.Output})
				allCompleted = allCompleted && tk.Status == store.StatusCompleted
			}
			runs, err := engine.Evaluate(nil, states, input)
			require.NoError(t, err, name)
			want := store.StatusSkipped
			if runs {
				want = store.StatusReady
			}
			require.Equal(t, want, tasks[n].Status, name)
			seen[want]++
			if allCompleted {
				require.Equal(t, before, asked, "%s: decided in SQL, the evaluator is not asked", name)
			} else {
				require.Equal(t, before+1, asked, "%s: the evaluator decides", name)
			}
		}
	}
	// Both outcomes occurred: the table tells the two paths apart.
	require.Equal(t, 2*3, seen[store.StatusReady])
	require.Equal(t, 2*(len(combos)-3), seen[store.StatusSkipped])
}
