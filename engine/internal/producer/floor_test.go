package producer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// A claim raises the floor to the margin below its first task: a second
// by default, less after a floor refresh slow enough to show that the
// entries below the floor cannot be cleaned (a held-back xmin).
func TestClaimFloorRisesToItsMarginBelowTheFirstTask(t *testing.T) {
	first := store.ClaimFloor{Priority: 1, At: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	var f Floor
	f.Raise(store.ClaimFloor{}, first)
	require.Equal(t, store.ClaimFloor{Priority: 1, At: first.At.Add(-FloorMargin)}, f.Get())

	f.SetMargin(MarginFor(FloorSlowRead))
	later := store.ClaimFloor{Priority: 1, At: first.At.Add(time.Minute)}
	f.Raise(f.Get(), later)
	require.Equal(t, store.ClaimFloor{Priority: 1, At: later.At.Add(-FloorMarginHeld)}, f.Get())

	require.Equal(t, FloorMargin, MarginFor(FloorSlowRead-time.Millisecond), "a fast refresh keeps the full margin")
	require.Less(t, FloorMarginHeld, FloorMargin)
}
