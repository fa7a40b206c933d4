package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// TestRerunFromHere: the task page of a finished run offers Rerun from
// here to admins (not to read-only users, not on a live run); the form,
// with an edited input, starts the rerun and goes to the new run, whose
// page links back; the API does the same and refuses with 4xx naming
// what was wrong.
func TestRerunFromHere(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	first := e.enqueue(t, map[string]int{"x": 1})
	e.waitRun(t, first, store.RunCompleted)
	b := e.task(t, first, "b")
	path := "/tasks/" + strconv.FormatInt(b.ID, 10)
	c := e.loggedIn(t, adminPW)

	doc := c.doc(path, http.StatusOK)
	require.Equal(t, 1, doc.Find(testid("rerun-form")).Length())
	require.Contains(t, doc.Find(testid("rerun-input")).Text(), `"x": 1`)
	require.Zero(t, e.loggedIn(t, readonlyPW).doc(path, http.StatusOK).Find(testid("rerun-form")).Length(), "read-only users get no form")

	res, body := c.postForm(path+"/rerun", url.Values{"input": {`{"x": 2}`}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	loc := res.Header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "/runs/"), loc)
	id, err := strconv.ParseInt(strings.TrimPrefix(loc, "/runs/"), 10, 64)
	require.NoError(t, err)
	run := e.waitRun(t, id, store.RunCompleted)
	require.JSONEq(t, `{"x": 2}`, string(run.Input))
	require.Equal(t, first, *run.RerunOf)
	a := e.task(t, id, "a")
	require.Equal(t, 0, a.Attempt, "a is not run again")
	require.JSONEq(t, `{"a": 1}`, string(a.Output))
	doc = c.doc(loc, http.StatusOK)
	link := doc.Find(testid("run-rerun-of"))
	require.Contains(t, link.Text(), "run #"+strconv.FormatInt(first, 10))
	require.Contains(t, link.Text(), "from task b")
	require.Equal(t, "/runs/"+strconv.FormatInt(first, 10), link.Find("a").AttrOr("href", ""))

	// A bad input is refused, naming it; nothing starts.
	res, body = c.postForm(path+"/rerun", url.Values{"input": {`[1]`}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	require.Contains(t, body, "JSON object")

	// A live run's tasks offer no rerun, and the form is refused.
	live, err := e.eng.Enqueue(context.Background(), "wf", nil, engine.WithRunAt(time.Now().Add(time.Hour)))
	require.NoError(t, err)
	livePath := "/tasks/" + strconv.FormatInt(e.task(t, live.ID, "b").ID, 10)
	require.Zero(t, c.doc(livePath, http.StatusOK).Find(testid("rerun-section")).Length())
	res, body = c.postForm(livePath+"/rerun", nil)
	require.Equal(t, http.StatusConflict, res.StatusCode, body)

	// The API.
	res, body = c.postJSON("/api/runs/"+strconv.FormatInt(first, 10)+"/rerun", `{"task": "b"}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, body)
	var out struct {
		ID        int64  `json:"id"`
		RerunOf   int64  `json:"rerun_of"`
		RerunFrom string `json:"rerun_from"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &out))
	require.Equal(t, first, out.RerunOf)
	require.Equal(t, "b", out.RerunFrom)
	run = e.waitRun(t, out.ID, store.RunCompleted)
	require.JSONEq(t, `{"x": 1}`, string(run.Input))
	res, body = c.get("/api/runs/" + strconv.FormatInt(out.ID, 10))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `"rerun_from": "b"`)
	res, body = c.postJSON("/api/runs/"+strconv.FormatInt(first, 10)+"/rerun", `{"task": "b", "input": {"x": 3}}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, body)

	for _, tc := range []struct {
		run    int64
		body   string
		status int
		says   string
	}{
		{first, `{"task": "zzz"}`, http.StatusBadRequest, `task \"zzz\": workflow`},
		{first, `{}`, http.StatusBadRequest, "task"},
		{first, `{"task": "b", "input": "x"}`, http.StatusBadRequest, "input"},
		{live.ID, `{"task": "b"}`, http.StatusConflict, "pending"},
		{999999, `{"task": "b"}`, http.StatusNotFound, "999999"},
	} {
		res, body = c.postJSON("/api/runs/"+strconv.FormatInt(tc.run, 10)+"/rerun", tc.body)
		require.Equal(t, tc.status, res.StatusCode, "%s: %s", tc.body, body)
		require.Contains(t, body, tc.says, tc.body)
	}
	res, body = e.loggedIn(t, readonlyPW).postJSON("/api/runs/"+strconv.FormatInt(first, 10)+"/rerun", `{"task": "b"}`)
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
}
