package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestColumnScansWhatTheDriverGives: each destination type from the
// values lib/pq hands over (text format), NULL as the zero value, JSON
// copied out of the driver's buffer.
func TestColumnScansWhatTheDriverGives(t *testing.T) {
	var c Claimed
	buf := []byte(`{"a":1}`)
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		dest column
		src  any
	}{
		{column{&c.ID}, int64(42)}, {column{&c.Idx}, int64(3)}, {column{&c.Workflow}, "wf"}, {column{&c.Name}, []byte("nm")},
		{column{&c.AvailableAt}, now}, {column{&c.RequeueOnInterrupt}, true}, {column{&c.WorkerID}, int64(7)},
		{column{&c.ConcKey}, "k"}, {column{&c.Checkpoint}, buf}, {column{&c.Deps}, []byte("{1,22,333}")},
		{column{&c.Dependents}, []byte("{}")},
	} {
		require.NoError(t, tc.dest.Scan(tc.src), "%T from %T", tc.dest.p, tc.src)
	}
	buf[2] = 'b' // the driver reuses its buffer
	require.Equal(t, int64(42), c.ID)
	require.Equal(t, 3, c.Idx)
	require.Equal(t, "wf", c.Workflow)
	require.Equal(t, "nm", c.Name)
	require.Equal(t, now, c.AvailableAt)
	require.True(t, c.RequeueOnInterrupt)
	require.Equal(t, int64(7), *c.WorkerID)
	require.Equal(t, "k", *c.ConcKey)
	require.JSONEq(t, `{"a":1}`, string(c.Checkpoint))
	require.Equal(t, []int{1, 22, 333}, c.Deps)
	require.Equal(t, []int{}, c.Dependents)

	for _, d := range []column{{&c.ID}, {&c.Idx}, {&c.Workflow}, {&c.AvailableAt}, {&c.RequeueOnInterrupt},
		{&c.WorkerID}, {&c.ConcKey}, {&c.Checkpoint}, {&c.Deps}} {
		require.NoError(t, d.Scan(nil))
	}
	require.Zero(t, c.ID)
	require.Zero(t, c.Idx)
	require.Empty(t, c.Workflow)
	require.True(t, c.AvailableAt.IsZero())
	require.False(t, c.RequeueOnInterrupt)
	require.Nil(t, c.WorkerID)
	require.Nil(t, c.ConcKey)
	require.Nil(t, c.Checkpoint)
	require.Nil(t, c.Deps)

	require.Error(t, column{&c.ID}.Scan(true))
	require.Error(t, column{&c.AvailableAt}.Scan("yesterday"))
	require.Error(t, column{&c.Deps}.Scan([]byte("{1,x}")))
	require.Error(t, column{&c.Deps}.Scan([]byte("1,2")))
	require.Error(t, column{new(float64)}.Scan(1.5))

	var ids []int64
	require.NoError(t, column{&ids}.Scan([]byte("{9007199254740993,-2}")))
	require.Equal(t, []int64{9007199254740993, -2}, ids)
	require.NoError(t, column{&ids}.Scan(nil))
	require.Nil(t, ids)
	var small []int
	require.NoError(t, column{&small}.Scan([]byte("{-1}")))
	require.Equal(t, []int{-1}, small)

	var first json.RawMessage
	f := firstJSON{&first}
	require.NoError(t, f.Scan(nil))
	require.NoError(t, f.Scan([]byte(`[1]`)))
	require.NoError(t, f.Scan(nil))
	require.NoError(t, f.Scan([]byte(`[2]`)))
	require.Equal(t, `[1]`, string(first))
}

// TestCheckColumnsNamesADrift: a reader's columns must be the
// statement's, by name and position.
func TestCheckColumnsNamesADrift(t *testing.T) {
	head, tail := []string{"id", "run_id"}, []string{"notified"}
	require.NoError(t, checkColumns([]string{"id", "run_id", "notified"}, head, tail))
	require.ErrorContains(t, checkColumns([]string{"run_id", "id", "notified"}, head, tail), "columns [run_id id notified]")
	require.Error(t, checkColumns([]string{"id", "run_id"}, head, tail))
	require.Error(t, checkColumns([]string{"id", "run_id", "notified", "extra"}, head, tail))
	require.Len(t, claimedNames, len(claimedDest(&Claimed{})))
}

// TestMoveTuplesDecodeInPlace: the moves of a finish-and-claim, as the
// statement's json_build_array writes them, decode field by field; a
// value of the wrong type fails the decode.
func TestMoveTuplesDecodeInPlace(t *testing.T) {
	var ms []moveTuple
	require.NoError(t, json.Unmarshal([]byte(`[[5, 7, "q", "running", "completed", 2], [9007199254740993, 8, "q2", "ready", "running", 1]]`), &ms))
	require.Equal(t, []moveTuple{
		{TaskID: 5, RunID: 7, Queue: "q", From: "running", To: "completed", Attempt: 2},
		{TaskID: 9007199254740993, RunID: 8, Queue: "q2", From: "ready", To: "running", Attempt: 1},
	}, ms)
	require.Error(t, json.Unmarshal([]byte(`[["5", 7, "q", "running", "completed", 2]]`), &ms))
}
