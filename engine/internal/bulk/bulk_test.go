package bulk_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/bulk"
)

func TestBatchesSortDedupeAndSplitDoneFromSkipped(t *testing.T) {
	var seen [][]int64
	res, err := bulk.Batches([]int64{5, 1, 3, 3, 2, 4}, 2, func(batch []int64) ([]int64, error) {
		seen = append(seen, batch)
		var done []int64
		for _, id := range batch {
			if id%2 == 1 {
				done = append(done, id)
			}
		}
		return done, nil
	})
	require.NoError(t, err)
	require.Equal(t, [][]int64{{1, 2}, {3, 4}, {5}}, seen)
	require.Equal(t, bulk.Result{Done: []int64{1, 3, 5}, Skipped: []int64{2, 4}}, res)

	boom := errors.New("boom")
	res, err = bulk.Batches([]int64{1, 2, 3}, 2, func(batch []int64) ([]int64, error) {
		if batch[0] == 3 {
			return nil, boom
		}
		return batch, nil
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, bulk.Result{Done: []int64{1, 2}}, res, "the batches before the error stay done")
}

func TestDistinctKeepsFirstAppearances(t *testing.T) {
	require.Equal(t, []int64{3, 1, 2}, bulk.Distinct([]int64{3, 1, 3, 2, 1}))
	require.Empty(t, bulk.Distinct(nil))
}
