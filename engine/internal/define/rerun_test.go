package define_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/define"
	"github.com/cairnhq/cairn/store"
)

// TestUpstream: the tasks upstream of a task are its dependencies,
// theirs, and so on, each once, in index order; a sibling branch is not
// upstream; an unknown name is ErrInvalidInput naming it and the tasks.
func TestUpstream(t *testing.T) {
	errInput := errors.New("invalid input")
	r := define.Rules{ErrInvalidInput: errInput}
	// a -> b, a -> c, {b, c} -> d, e alone.
	ts := []store.TaskTemplate{
		{Idx: 0, Name: "a", Deps: []int{}},
		{Idx: 1, Name: "b", Deps: []int{0}},
		{Idx: 2, Name: "c", Deps: []int{0}},
		{Idx: 3, Name: "d", Deps: []int{2, 1}},
		{Idx: 4, Name: "e", Deps: []int{}},
	}
	for _, tc := range []struct {
		name string
		at   int
		up   []int
	}{{"a", 0, nil}, {"b", 1, []int{0}}, {"d", 3, []int{0, 1, 2}}, {"e", 4, nil}} {
		at, up, err := r.Upstream("w", ts, tc.name)
		require.NoError(t, err)
		require.Equal(t, tc.at, at, tc.name)
		require.Equal(t, tc.up, up, tc.name)
	}
	_, _, err := r.Upstream("w", ts, "x")
	require.ErrorIs(t, err, errInput)
	require.ErrorContains(t, err, `task "x": workflow "w" has no such task; its tasks: a, b, c, d, e`)
}
