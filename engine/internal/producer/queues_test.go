package producer

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// A claim raises each queue's floor to the margin below the lowest
// unkeyed task it took, moves the keyed turn past the keys it visited,
// and a failed claim puts the floors back to the start.
func TestQueuesAfterClaim(t *testing.T) {
	qs := Queues[int]{"a": NewQueue[int]("a", 4), "b": NewQueue[int]("b", 4)}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	key := "k"
	p := qs.ClaimParams(1, time.Minute, false, []*Queue[int]{qs["a"], qs["b"]}, []int{2, 2})
	require.Equal(t, []string{"a", "b"}, p.Queues)
	require.Nil(t, p.Floors, "floors at the start")
	qs.AfterClaim(p, []store.Claimed{
		{Task: store.Task{Queue: "a", AvailableAt: at.Add(time.Second)}},
		{Task: store.Task{Queue: "a", AvailableAt: at}},
		{Task: store.Task{Queue: "b", AvailableAt: at, ConcKey: &key}, AfterKey: &key},
	}, nil)
	require.Equal(t, at.Add(-FloorMargin), qs["a"].Floor.Get().At)
	require.True(t, qs["b"].Floor.Get().At.IsZero(), "keyed tasks say nothing of the unkeyed floor")
	require.Equal(t, map[string]string{"b": "k"}, qs.Turns([]string{"a", "b"}))
	require.Equal(t, map[string]store.ClaimFloor{"a": qs["a"].Floor.Get()}, qs.Floors([]string{"a", "b"}))

	qs.AfterClaim(qs.ClaimParams(1, time.Minute, true, []*Queue[int]{qs["a"]}, []int{1}), nil, errors.New("rolled back"))
	require.True(t, qs["a"].Floor.Get().At.IsZero())
}

// Held counts the slots taken across queues.
func TestQueuesHeld(t *testing.T) {
	qs := Queues[int]{"a": NewQueue[int]("a", 4), "b": NewQueue[int]("b", 2)}
	require.Zero(t, qs.Held())
	require.Equal(t, 3, qs["a"].Slots.TryAcquireUpTo(3))
	require.Equal(t, 1, qs["b"].Slots.TryAcquireUpTo(1))
	require.Equal(t, 4, qs.Held())
	qs["a"].Slots.Release(3)
	require.Equal(t, 1, qs.Held())
}
