package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// sendJSON sends a JSON body with method to the API, with the CSRF header.
func (c *client) sendJSON(method, path, body string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	if c.csrf != "" {
		req.Header.Set("X-CSRF-Token", c.csrf)
	}
	return c.do(req)
}

// storedSchedule returns the stored schedule name, or nil.
func (e *env) storedSchedule(t *testing.T, name string) *store.Schedule {
	t.Helper()
	sc, err := e.st.ScheduleGet(context.Background(), name)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	require.NoError(t, err)
	return sc
}

func apiError(t *testing.T, body string) string {
	t.Helper()
	var out struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &out), body)
	return out.Error
}

func TestScheduleAPI(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	admin := e.loggedIn(t, adminPW)
	ro := e.loggedIn(t, readonlyPW)

	// Create: 201 with the stored schedule and its next five fires.
	res, body := admin.sendJSON("POST", "/api/schedules",
		`{"name":"hourly","expression":"0 * * * *","timezone":"Europe/Berlin","workflow":"wf","input":{"from":"api"},"catch_up":"one"}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, body)
	var created struct {
		Schedule struct {
			Name      string   `json:"name"`
			Timezone  string   `json:"timezone"`
			CatchUp   string   `json:"catch_up"`
			NextFires []string `json:"next_fires"`
		} `json:"schedule"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &created))
	require.Equal(t, "hourly", created.Schedule.Name)
	require.Equal(t, "Europe/Berlin", created.Schedule.Timezone)
	require.Equal(t, "one", created.Schedule.CatchUp)
	require.Len(t, created.Schedule.NextFires, 5)
	sc := e.storedSchedule(t, "hourly")
	require.NotNil(t, sc)
	require.JSONEq(t, `{"from":"api"}`, string(sc.Input))

	// Refusals: each names the field, and stores nothing.
	for _, tc := range []struct {
		name, body string
		status     int
		want       string
	}{
		{"bad expression", `{"name":"x1","expression":"61 * * * *","workflow":"wf"}`, http.StatusBadRequest, "expression"},
		{"bad time zone", `{"name":"x2","expression":"@hourly","timezone":"Mars/Olympus","workflow":"wf"}`, http.StatusBadRequest, "timezone"},
		{"unknown workflow", `{"name":"x3","expression":"@hourly","workflow":"nope"}`, http.StatusBadRequest, "workflow"},
		{"no workflow", `{"name":"x4","expression":"@hourly"}`, http.StatusBadRequest, "workflow is required"},
		{"bad name", `{"name":"has space","expression":"@hourly","workflow":"wf"}`, http.StatusBadRequest, "name"},
		{"bad catch-up", `{"name":"x5","expression":"@hourly","workflow":"wf","catch_up":"most"}`, http.StatusBadRequest, "catch_up"},
		{"input not an object", `{"name":"x6","expression":"@hourly","workflow":"wf","input":[1]}`, http.StatusBadRequest, "input"},
		{"wrong type", `{"name":"x7","expression":"@hourly","workflow":"wf","max_catch_up":"lots"}`, http.StatusBadRequest, "max_catch_up"},
		{"taken name", `{"name":"hourly","expression":"@daily","workflow":"wf"}`, http.StatusConflict, "already exists"},
	} {
		res, body := admin.sendJSON("POST", "/api/schedules", tc.body)
		require.Equal(t, tc.status, res.StatusCode, "%s: %s", tc.name, body)
		require.Contains(t, apiError(t, body), tc.want, tc.name)
	}
	for _, n := range []string{"x1", "x2", "x3", "x4", "x5", "x6", "x7"} {
		require.Nil(t, e.storedSchedule(t, n), n)
	}
	require.Equal(t, "0 * * * *", e.storedSchedule(t, "hourly").Expression, "the 409 changed nothing")

	// Read-only: 403, nothing changes.
	res, body = ro.sendJSON("POST", "/api/schedules", `{"name":"ro","expression":"@hourly","workflow":"wf"}`)
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	res, body = ro.sendJSON("PUT", "/api/schedules/hourly", `{"expression":"@daily","workflow":"wf"}`)
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	res, body = ro.sendJSON("DELETE", "/api/schedules/hourly", ``)
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	require.Nil(t, e.storedSchedule(t, "ro"))
	require.Equal(t, "0 * * * *", e.storedSchedule(t, "hourly").Expression)

	// Update: 200 with the new definition; the paused state stays.
	require.NoError(t, e.eng.PauseSchedule(context.Background(), "hourly"))
	res, body = admin.sendJSON("PUT", "/api/schedules/hourly", `{"expression":"*/15 * * * *","timezone":"UTC","workflow":"wf","input":{"v":2}}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `"expression": "*/15 * * * *"`)
	sc = e.storedSchedule(t, "hourly")
	require.Equal(t, "*/15 * * * *", sc.Expression)
	require.Equal(t, "UTC", sc.Timezone)
	require.JSONEq(t, `{"v":2}`, string(sc.Input))
	require.True(t, sc.Paused)

	for _, tc := range []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"bad expression", "/api/schedules/hourly", `{"expression":"every day","workflow":"wf"}`, http.StatusBadRequest, "expression"},
		{"rename", "/api/schedules/hourly", `{"name":"other","expression":"@daily","workflow":"wf"}`, http.StatusBadRequest, "renamed"},
		{"paused", "/api/schedules/hourly", `{"expression":"@daily","workflow":"wf","paused":false}`, http.StatusBadRequest, "paused"},
		{"unknown", "/api/schedules/nope", `{"expression":"@daily","workflow":"wf"}`, http.StatusNotFound, `"nope" not found`},
	} {
		res, body := admin.sendJSON("PUT", tc.path, tc.body)
		require.Equal(t, tc.status, res.StatusCode, "%s: %s", tc.name, body)
		require.Contains(t, apiError(t, body), tc.want, tc.name)
	}
	require.Equal(t, "*/15 * * * *", e.storedSchedule(t, "hourly").Expression, "refused updates changed nothing")

	// Delete: 200, then 404.
	res, body = admin.sendJSON("DELETE", "/api/schedules/hourly", ``)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Nil(t, e.storedSchedule(t, "hourly"))
	res, body = admin.sendJSON("DELETE", "/api/schedules/hourly", ``)
	require.Equal(t, http.StatusNotFound, res.StatusCode, body)
}

func parseDoc(t *testing.T, body string) *goquery.Document {
	t.Helper()
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	require.NoError(t, err)
	return doc
}
