package claim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// KeepBuf keeps the larger of the two arrays, emptied: the next claim
// reads into it, and it holds on to nothing of the last one's rows.
func TestKeepBuf(t *testing.T) {
	buf := make([]store.Claimed, 0, 2)
	claimed := append(buf, store.Claimed{Task: store.Task{ID: 1, Name: "a"}}, store.Claimed{Task: store.Task{ID: 2}})
	KeepBuf(&buf, claimed)
	require.Len(t, buf, 0)
	require.Equal(t, 2, cap(buf))
	require.Equal(t, store.Claimed{}, buf[:2][0], "emptied")

	grown := append(buf, make([]store.Claimed, 3)...) // a claim that did not fit
	grown[2].Name = "c"
	KeepBuf(&buf, grown)
	require.Equal(t, cap(grown), cap(buf), "the larger array is kept")
	require.Equal(t, store.Claimed{}, buf[:3][2])

	buf[:1][0].Name = "partial" // a failed claim's rows
	KeepBuf(&buf, nil)
	require.Equal(t, cap(grown), cap(buf))
	require.Equal(t, store.Claimed{}, buf[:1][0])
}
