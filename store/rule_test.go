package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/rule"
)

// The transition statement decides one case of trigger rules by itself
// (readyInSQL): the default rule of a dependent whose dependencies all
// completed, which it makes ready. rule.Eval decides the same; every
// other case goes to rule.Eval after the statement. A dependent the
// statement made ready is told apart by its move, which carries no run
// (see TransitionAll).
func TestSQLDecidesOnlyTheDefaultRuleOverCompletedDeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	p := diamond()
	res, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{p})
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	finish := func(to string, cs ...store.Claimed) []store.Moved {
		t.Helper()
		items := make([]store.TransitionItem, len(cs))
		for i, c := range cs {
			items[i] = store.TransitionItem{TaskID: c.ID, To: to, Attempt: c.Attempt}
		}
		_, released, err := b.st.TransitionAll(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w, Items: items})
		require.NoError(t, err)
		return released
	}

	// a completes: b and c, default rule, every dependency completed.
	a := claimAll(t, b.st, w, 10)
	require.Len(t, a, 1)
	released := finish(store.StatusCompleted, a...)
	require.Len(t, released, 2)
	for _, m := range released {
		require.Equal(t, store.StatusReady, m.To)
		require.Zero(t, m.RunID, "made ready by the statement")
	}
	ok, err := rule.Eval(nil, []rule.Dep{{Name: "a", Status: store.StatusCompleted}}, p.Input)
	require.NoError(t, err)
	require.True(t, ok, "rule.Eval agrees")

	// b completes, c fails: d's dependencies did not all complete, and
	// rule.Eval skips it.
	bc := claimAll(t, b.st, w, 10)
	require.Len(t, bc, 2)
	byName := map[string]store.Claimed{bc[0].Name: bc[0], bc[1].Name: bc[1]}
	require.Empty(t, finish(store.StatusCompleted, byName["b"]))
	released = finish(store.StatusFailed, byName["c"])
	require.Len(t, released, 1)
	require.Equal(t, store.StatusSkipped, released[0].To)
	require.Equal(t, res[0].ID, released[0].RunID, "decided by rule.Eval")
	ok, err = rule.Eval(json.RawMessage(nil), []rule.Dep{{Name: "b", Status: store.StatusCompleted}, {Name: "c", Status: store.StatusFailed}}, p.Input)
	require.NoError(t, err)
	require.False(t, ok)
}
