package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// A batch mixing debounced and plain runs: the plain ones are inserted
// together, the debounced ones in turn (the second of a key replaces the
// first's input), and each result stands at its run's place.
func TestRunInsertManyMixesDebouncedAndPlainRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	run := func(input string, d *store.Debounce) store.RunInsertParams {
		return store.RunInsertParams{Workflow: "w", Input: json.RawMessage(input), Queue: "default", Debounce: d,
			Tasks: []store.TaskTemplate{{Idx: 0, Name: "a", MaxAttempts: 1, Deps: []int{}, Dependents: []int{}}}}
	}
	d := &store.Debounce{Key: "k", Wait: time.Minute, MaxWait: time.Hour}
	rs, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{run(`{"n": 1}`, d), run(`{"p": 1}`, nil), run(`{"n": 2}`, d), run(`{"p": 2}`, nil)})
	require.NoError(t, err)
	require.Len(t, rs, 4)
	require.Equal(t, rs[0].ID, rs[2].ID, "the second enqueue of the key takes the queued run")
	require.True(t, rs[2].Existing)
	require.False(t, rs[1].Existing || rs[3].Existing)
	for i, r := range rs {
		require.Equal(t, i, r.Ord)
	}
	inputs := map[int64]string{}
	for _, id := range []int64{rs[0].ID, rs[1].ID, rs[3].ID} {
		r, err := b.st.RunGet(ctx, id)
		require.NoError(t, err)
		inputs[id] = string(r.Input)
	}
	require.Equal(t, map[int64]string{rs[0].ID: `{"n": 2}`, rs[1].ID: `{"p": 1}`, rs[3].ID: `{"p": 2}`}, inputs)
}
