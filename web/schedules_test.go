package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
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

func TestScheduleForms(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	admin := e.loggedIn(t, adminPW)
	ro := e.loggedIn(t, readonlyPW)

	// The read-only role gets neither the button nor the form.
	doc := ro.doc("/schedules", http.StatusOK)
	require.Zero(t, doc.Find(testid("schedule-new")).Length())
	ro.doc("/schedules/new", http.StatusForbidden)

	doc = admin.doc("/schedules", http.StatusOK)
	require.Equal(t, "/schedules/new", doc.Find(testid("schedule-new")).AttrOr("href", ""))
	doc = admin.doc("/schedules/new", http.StatusOK)
	form := doc.Find(testid("schedule-form"))
	require.Equal(t, "/schedules", form.AttrOr("action", ""))
	require.Equal(t, admin.csrf, form.Find(`input[name="csrf_token"]`).AttrOr("value", ""))
	require.Equal(t, "wf", form.Find(`select[name="workflow"] option`).First().AttrOr("value", ""))
	require.Equal(t, 1, form.Find(testid("preview-empty")).Length(), "no expression yet")

	// A bad expression: the form again (400), with the values as sent and
	// the error beside the expression; nothing stored.
	vals := url.Values{"name": {"nightly2"}, "workflow": {"wf"}, "expression": {"0 25 * * *"}, "timezone": {"Europe/Berlin"},
		"input": {`{"k":"v"}`}, "catch_up": {"skip"}, "max_catch_up": {""}}
	res, body := admin.postForm("/schedules", vals)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	doc = parseDoc(t, body)
	require.Equal(t, "expression", doc.Find(testid("field-error")).AttrOr("data-field", ""))
	require.Contains(t, doc.Find(testid("field-error")).Text(), "above maximum (23)")
	require.Equal(t, "0 25 * * *", doc.Find(testid("schedule-expression")).AttrOr("value", ""))
	require.Equal(t, "nightly2", doc.Find(testid("schedule-name")).AttrOr("value", ""))
	require.Contains(t, doc.Find(testid("schedule-input")).Text(), `{"k":"v"}`)
	require.Equal(t, 1, doc.Find(testid("preview-error")).Length())
	require.Nil(t, e.storedSchedule(t, "nightly2"))

	// Bad max catch-up: named too.
	vals.Set("expression", "0 2 * * *")
	vals.Set("max_catch_up", "many")
	res, body = admin.postForm("/schedules", vals)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	require.Equal(t, "max_catch_up", parseDoc(t, body).Find(testid("field-error")).AttrOr("data-field", ""))
	require.Nil(t, e.storedSchedule(t, "nightly2"))

	// Without the CSRF token: 403, nothing stored.
	vals.Set("max_catch_up", "")
	res, _ = admin.postForm("/schedules", url.Values{"csrf_token": {"forged"}, "name": {"nightly2"}, "workflow": {"wf"}, "expression": {"@daily"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.Nil(t, e.storedSchedule(t, "nightly2"))

	// Created; the list shows it with an Edit link.
	res, body = admin.postForm("/schedules", vals)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.Equal(t, "/schedules", res.Header.Get("Location"))
	sc := e.storedSchedule(t, "nightly2")
	require.NotNil(t, sc)
	require.Equal(t, "0 2 * * *", sc.Expression)
	require.Equal(t, "Europe/Berlin", sc.Timezone)
	doc = admin.doc("/schedules", http.StatusOK)
	require.Equal(t, "Schedule nightly2 created.", strings.TrimSpace(doc.Find(testid("flash")).Text()))
	row := doc.Find(testid("schedule-row") + `[data-schedule="nightly2"]`)
	require.Equal(t, "/schedules/nightly2/edit", row.Find(testid("schedule-edit")).AttrOr("href", ""))

	// A second one with the same name: 409, beside the name.
	res, body = admin.postForm("/schedules", vals)
	require.Equal(t, http.StatusConflict, res.StatusCode, body)
	require.Equal(t, "name", parseDoc(t, body).Find(testid("field-error")).AttrOr("data-field", ""))

	// Edit: the form holds the stored values and the next fires.
	doc = admin.doc("/schedules/nightly2/edit", http.StatusOK)
	require.Equal(t, "/schedules/nightly2", doc.Find(testid("schedule-form")).AttrOr("action", ""))
	require.Equal(t, "0 2 * * *", doc.Find(testid("schedule-expression")).AttrOr("value", ""))
	require.Equal(t, 5, doc.Find(testid("preview-fire")).Length())
	admin.doc("/schedules/nope/edit", http.StatusNotFound)

	vals.Set("expression", "30 3 * * 1")
	vals.Set("input", `{"k":"w"}`)
	res, body = admin.postForm("/schedules/nightly2", vals)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	sc = e.storedSchedule(t, "nightly2")
	require.Equal(t, "30 3 * * 1", sc.Expression)
	require.JSONEq(t, `{"k":"w"}`, string(sc.Input))

	// A refused edit keeps the stored definition.
	vals.Set("timezone", "Nowhere/Land")
	res, body = admin.postForm("/schedules/nightly2", vals)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	require.Equal(t, "timezone", parseDoc(t, body).Find(testid("field-error")).AttrOr("data-field", ""))
	require.Equal(t, "Europe/Berlin", e.storedSchedule(t, "nightly2").Timezone)

	// Read-only cannot delete; the admin can.
	res, _ = ro.postForm("/schedules/nightly2/delete", nil)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.NotNil(t, e.storedSchedule(t, "nightly2"))
	res, body = admin.postForm("/schedules/nightly2/delete", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.Nil(t, e.storedSchedule(t, "nightly2"))
	res, _ = admin.postForm("/schedules/nightly2/delete", nil)
	require.Equal(t, http.StatusNotFound, res.StatusCode)
}

func TestSchedulePreviewFragment(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, readonlyPW)

	doc := c.doc("/fragments/schedules/preview?"+url.Values{"expression": {"0 9 * * *"}, "timezone": {"America/New_York"}}.Encode(), http.StatusOK)
	fires := doc.Find(testid("preview-fire"))
	require.Equal(t, 5, fires.Length())
	first := fires.First().Text()
	require.Contains(t, first, "09:00")
	require.Regexp(t, `E[SD]T$`, first, "shown in the schedule's zone")

	doc = c.doc("/fragments/schedules/preview?"+url.Values{"expression": {"*/5 * * *"}}.Encode(), http.StatusBadRequest)
	require.Contains(t, doc.Find(testid("preview-error")).Text(), "expression")
	doc = c.doc("/fragments/schedules/preview?"+url.Values{"expression": {"@daily"}, "timezone": {"Mars/Base"}}.Encode(), http.StatusBadRequest)
	require.Contains(t, doc.Find(testid("preview-error")).Text(), "timezone")
	doc = c.doc("/fragments/schedules/preview", http.StatusOK)
	require.Equal(t, 1, doc.Find(testid("preview-empty")).Length())
}

func parseDoc(t *testing.T, body string) *goquery.Document {
	t.Helper()
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	require.NoError(t, err)
	return doc
}
