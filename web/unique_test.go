package web_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// TestEnqueueAPIUniqueFor: POST /api/runs with a key and unique_for keeps
// the key held after the run finished: the second enqueue returns the
// first run.
func TestEnqueueAPIUniqueFor(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, adminPW)
	post := func() (int64, bool) {
		res, body := c.postJSON("/api/runs", `{"workflow":"wf","key":"report:1","unique_for":"1h"}`)
		require.Contains(t, []int{http.StatusOK, http.StatusCreated}, res.StatusCode, body)
		var run struct {
			ID       int64 `json:"id"`
			Existing bool  `json:"existing"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &run), body)
		return run.ID, run.Existing
	}
	first, existing := post()
	require.False(t, existing)
	e.waitRun(t, first, store.RunCompleted)
	again, existing := post()
	require.Equal(t, first, again, "the finished run holds its key within unique_for")
	require.True(t, existing)
}
