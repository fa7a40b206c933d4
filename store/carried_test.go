package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// Tests of the dependency outputs a finish carries into its dependents'
// rows (migration 021) and of the claim's fallback to reading them.

// completeWith finishes c as completed with output out.
func completeWith(t *testing.T, st *store.Store, worker int64, c store.Claimed, out string) {
	t.Helper()
	moved, err := st.Transition(context.Background(), store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: worker,
		Items: []store.TransitionItem{{TaskID: c.ID, To: store.StatusCompleted, Attempt: c.Attempt, Output: json.RawMessage(out)}}})
	require.NoError(t, err)
	require.Len(t, moved, 1)
}

// carried reads what task id carries of its dependencies: how many
// carried, and their outputs that are not null.
func carried(t *testing.T, b bundle, id int64) (n *int, outputs *string) {
	t.Helper()
	require.NoError(t, b.db.SQL.QueryRow(`SELECT carried_n, carried_outputs::text FROM `+pgtest.Schema+`.tasks WHERE id = $1`, id).
		Scan(&n, &outputs))
	return n, outputs
}

// startDiamond inserts a diamond run (a; b and c after a; d after both),
// finishes a with output aOut and claims b and c. It returns the store,
// the worker, the run and the claimed b and c.
func startDiamond(t *testing.T, aOut string) (bundle, int64, int64, []store.Claimed) {
	t.Helper()
	b := setup(t)
	res, err := b.st.RunInsertMany(context.Background(), []store.RunInsertParams{diamond()})
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(context.Background(), "w", map[string]int{"default": 10})
	require.NoError(t, err)
	a := claimAll(t, b.st, w, 10)
	require.Len(t, a, 1)
	completeWith(t, b.st, w, a[0], aOut)
	bc := claimAll(t, b.st, w, 10)
	require.Len(t, bc, 2)
	return b, w, res[0].ID, bc
}

// byName picks the claimed task called name.
func byName(t *testing.T, cs []store.Claimed, name string) store.Claimed {
	t.Helper()
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no claimed task %q among %d", name, len(cs))
	return store.Claimed{}
}

// The join of a diamond gets the outputs of both its dependencies,
// finished in two statements, from its own row: each finish appended
// its [idx, output], and the join drops them when it finishes.
func TestFinishesCarryOutputsToTheirDependents(t *testing.T) {
	t.Parallel()
	b, w, run, bc := startDiamond(t, `{"a": 1}`)
	for _, c := range bc {
		require.JSONEq(t, `[[0, {"a": 1}]]`, string(c.DepOutputs), c.Name)
	}
	completeWith(t, b.st, w, byName(t, bc, "b"), `{"b": 2}`)
	completeWith(t, b.st, w, byName(t, bc, "c"), `{"c": 3}`)
	join := diamondTasks(t, b.st, run)["d"]
	require.Equal(t, store.StatusReady, join.Status)
	n, got := carried(t, b, join.ID)
	require.Equal(t, 2, *n)
	require.NotNil(t, got)
	require.JSONEq(t, `[[1, {"b": 2}], [2, {"c": 3}]]`, *got)

	// The claim returns the carried list itself: one put there by hand
	// is what the handler gets.
	_, err := b.db.SQL.Exec(`UPDATE `+pgtest.Schema+`.tasks SET carried_outputs = '[[1, "carried"], [2, "carried"]]' WHERE id = $1`, join.ID)
	require.NoError(t, err)
	d := claimAll(t, b.st, w, 10)
	require.Len(t, d, 1)
	require.JSONEq(t, `[[1, "carried"], [2, "carried"]]`, string(d[0].DepOutputs))
	completeWith(t, b.st, w, d[0], `{}`)
	n, got = carried(t, b, join.ID)
	require.Nil(t, n, "a finished task keeps its count")
	require.Nil(t, got, "a finished task keeps what it carried")
}

// Dependencies that finish without output are counted, and nothing is
// carried for them: the join's claim gets no outputs, without reading
// their rows.
func TestFinishesWithoutOutputCarryOnlyTheCount(t *testing.T) {
	t.Parallel()
	b, w, run, bc := startDiamond(t, `null`)
	complete(t, b.st, w, store.StatusCompleted, bc...)
	join := diamondTasks(t, b.st, run)["d"]
	n, got := carried(t, b, join.ID)
	require.Equal(t, 2, *n)
	require.Nil(t, got)
	d := claimAll(t, b.st, w, 10)
	require.Len(t, d, 1)
	require.JSONEq(t, `[]`, string(d[0].DepOutputs))
}

// What is carried is not used unless the count says each dependency
// carried once: the claim reads the dependencies' rows.
func TestClaimReadsDependenciesWhenTheCarriedListIsOff(t *testing.T) {
	t.Parallel()
	for name, count := range map[string]string{"missing": `NULL`, "short": `1`, "long": `3`} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b, w, run, bc := startDiamond(t, `{"a": 1}`)
			completeWith(t, b.st, w, byName(t, bc, "b"), `{"b": 2}`)
			completeWith(t, b.st, w, byName(t, bc, "c"), `{"c": 3}`)
			join := diamondTasks(t, b.st, run)["d"]
			_, err := b.db.SQL.Exec(`UPDATE `+pgtest.Schema+`.tasks SET carried_n = `+count+`,
				carried_outputs = '[[1, "stale"], [2, "stale"]]' WHERE id = $1`, join.ID)
			require.NoError(t, err)
			d := claimAll(t, b.st, w, 10)
			require.Len(t, d, 1)
			require.JSONEq(t, `[[1, {"b": 2}], [2, {"c": 3}]]`, string(d[0].DepOutputs))
		})
	}
}

// A dependency that failed, was reopened and then completed leaves its
// dependent a list it cannot use (the reopen cleared it, the completion
// carried one entry of two); the dependent's claim reads the outputs
// from the rows and gets the new one.
func TestReopenedDependencyOutputReachesItsDependent(t *testing.T) {
	t.Parallel()
	b, w, run, bc := startDiamond(t, `{"a": 1}`)
	completeWith(t, b.st, w, byName(t, bc, "c"), `{"c": 3}`)
	complete(t, b.st, w, store.StatusFailed, byName(t, bc, "b"))
	require.Equal(t, store.StatusSkipped, diamondTasks(t, b.st, run)["d"].Status)

	_, err := b.st.TaskReopen(context.Background(), &store.TaskReopenParams{TaskID: byName(t, bc, "b").ID, From: []string{store.StatusFailed}})
	require.NoError(t, err)
	join := diamondTasks(t, b.st, run)["d"]
	require.Equal(t, store.StatusNotStarted, join.Status)
	n, got := carried(t, b, join.ID)
	require.Nil(t, n, "the reopen left the skipped dependent's count")
	require.Nil(t, got, "the reopen left the skipped dependent's list")

	again := claimAll(t, b.st, w, 10)
	require.Len(t, again, 1)
	completeWith(t, b.st, w, again[0], `{"b": "again"}`)
	n, got = carried(t, b, join.ID)
	require.Equal(t, 1, *n)
	require.JSONEq(t, `[[1, {"b": "again"}]]`, *got)
	d := claimAll(t, b.st, w, 10)
	require.Len(t, d, 1)
	require.Equal(t, "d", d[0].Name)
	require.JSONEq(t, `[[1, {"b": "again"}], [2, {"c": 3}]]`, string(d[0].DepOutputs))
}
