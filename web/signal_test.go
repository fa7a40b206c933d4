package web_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

func TestAPISignalStoresASignalForTheTask(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	// Paused queue: the run's tasks stay unfinished while the test signals them.
	require.NoError(t, e.eng.PauseQueue(ctx, "default"))
	runID := e.enqueue(t, nil)
	a := e.task(t, runID, "a")
	c := e.loggedIn(t, adminPW)
	path := fmt.Sprintf("/api/tasks/%d/signal", a.ID)
	signals := func() []store.Signal {
		sigs, err := e.st.SignalListByTask(ctx, a.ID)
		require.NoError(t, err)
		return sigs
	}

	// Bad input: 400 naming the field, 404 for an unknown task; nothing stored.
	for _, tc := range []struct {
		path, body, want string
		status           int
	}{
		{path, `{}`, "name", http.StatusBadRequest},
		{path, `{"name": ""}`, "name", http.StatusBadRequest},
		{path, `{"name": 7}`, "name", http.StatusBadRequest},
		{path, `{"name": "go", "payload": {"x": "\u0000"}}`, "payload", http.StatusBadRequest},
		{path, `{"name": "go", "bogus": 1}`, "bogus", http.StatusBadRequest},
		{"/api/tasks/abc/signal", `{"name": "go"}`, "task id", http.StatusBadRequest},
		{"/api/tasks/99999999/signal", `{"name": "go"}`, "not found", http.StatusNotFound},
	} {
		res, body := c.postJSON(tc.path, tc.body)
		require.Equal(t, tc.status, res.StatusCode, "%s %s: %s", tc.path, tc.body, body)
		require.Contains(t, body, tc.want, "%s %s", tc.path, tc.body)
	}
	require.Empty(t, signals(), "a refused signal stores nothing")

	// The read-only login may not signal.
	ro := e.loggedIn(t, readonlyPW)
	res, body := ro.postJSON(path, `{"name": "go"}`)
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	require.Empty(t, signals())

	res, body = c.postJSON(path, `{"name": "go", "payload": {"n": 1}}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	res, body = c.postJSON(path, `{"name": "go"}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	sigs := signals()
	require.Len(t, sigs, 2)
	require.Equal(t, "go", sigs[0].Name)
	require.JSONEq(t, `{"n": 1}`, string(sigs[0].Payload))
	require.JSONEq(t, `null`, string(sigs[1].Payload), "no payload is null")

	// A finished task takes no signal: 409.
	require.NoError(t, e.eng.ResumeQueue(ctx, "default"))
	e.waitRun(t, runID, store.RunCompleted)
	res, body = c.postJSON(path, `{"name": "go"}`)
	require.Equal(t, http.StatusConflict, res.StatusCode, body)
	require.Len(t, signals(), 2)
}
