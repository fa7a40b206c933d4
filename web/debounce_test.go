package web_test

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEnqueueAPIDebounce: POST /api/runs with debounce twice gives one
// run with the second input, whose page shows its start and its cap; a
// singleton likewise keeps one queued run.
func TestEnqueueAPIDebounce(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, adminPW)
	post := func(body string) (int64, bool) {
		res, out := c.postJSON("/api/runs", body)
		require.Contains(t, []int{http.StatusOK, http.StatusCreated}, res.StatusCode, out)
		var run struct {
			ID       int64 `json:"id"`
			Existing bool  `json:"existing"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &run), out)
		return run.ID, run.Existing
	}
	for _, opt := range []string{`"debounce":{"key":"k","wait":"1h","max_wait":"2h"}`, `"singleton":"s","run_at":"2999-01-01T00:00:00Z"`} {
		first, existing := post(`{"workflow":"wf","input":{"n":1},` + opt + `}`)
		require.False(t, existing)
		again, existing := post(`{"workflow":"wf","input":{"n":2},` + opt + `}`)
		require.True(t, existing)
		require.Equal(t, first, again)
		run, err := e.st.RunGet(t.Context(), first)
		require.NoError(t, err)
		require.JSONEq(t, `{"n":2}`, string(run.Input))
		text := c.doc("/runs/"+strconv.FormatInt(first, 10), http.StatusOK).Find(`[data-testid="run-debounce"]`).Text()
		if strings.Contains(opt, "debounce") {
			require.Contains(t, text, "debounced until")
			require.Contains(t, text, "at most until")
		} else {
			require.Contains(t, text, "singleton")
		}
	}
	res, out := c.postJSON("/api/runs", `{"workflow":"wf","debounce":{"key":"k","wait":"soon","max_wait":"1h"}}`)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, out)
	require.Contains(t, out, "debounce.wait")
	res, out = c.postJSON("/api/runs", `{"workflow":"wf","debounce":{"key":"k","wait":"2h","max_wait":"1h"}}`)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, out)
	require.Contains(t, out, "max wait")
}
