package engine

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
	var f claimFloor
	f.raise(store.ClaimFloor{}, first)
	require.Equal(t, store.ClaimFloor{Priority: 1, At: first.At.Add(-floorMargin)}, f.get())

	f.setMargin(floorMarginFor(floorSlowRead))
	later := store.ClaimFloor{Priority: 1, At: first.At.Add(time.Minute)}
	f.raise(f.get(), later)
	require.Equal(t, store.ClaimFloor{Priority: 1, At: later.At.Add(-floorMarginHeld)}, f.get())

	require.Equal(t, floorMargin, floorMarginFor(floorSlowRead-time.Millisecond), "a fast refresh keeps the full margin")
	require.Less(t, floorMarginHeld, floorMargin)
}
