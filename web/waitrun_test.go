package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// TestAPIRunWait: GET /api/runs/{id}?wait= answers once the run has
// ended, or with the run as it is when the wait runs out; a bad wait is a
// 400 naming the field, an unknown run a 404.
func TestAPIRunWait(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, readonlyPW)
	ctx := context.Background()
	status := func(path string) string {
		t.Helper()
		res, out := c.get(path)
		require.Equal(t, http.StatusOK, res.StatusCode, out)
		var got struct {
			Run store.Run `json:"run"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &got))
		return got.Run.Status
	}

	soon, err := e.eng.Enqueue(ctx, "wf", nil, engine.WithRunAt(time.Now().Add(300*time.Millisecond)))
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, status("/api/runs/"+strconv.FormatInt(soon.ID, 10)+"?wait=30s"))

	later, err := e.eng.Enqueue(ctx, "wf", nil, engine.WithRunAt(time.Now().Add(time.Hour)))
	require.NoError(t, err)
	require.Equal(t, store.RunPending, status("/api/runs/"+strconv.FormatInt(later.ID, 10)+"?wait=100ms"), "the wait ran out")

	for _, bad := range []string{"soon", "-1s", "2m"} {
		res, out := c.get("/api/runs/" + strconv.FormatInt(later.ID, 10) + "?wait=" + bad)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, out)
		require.Contains(t, out, "wait must be a duration from 0s to 1m0s")
	}
	res, out := c.get("/api/runs/987654?wait=1s")
	require.Equal(t, http.StatusNotFound, res.StatusCode, out)
}
