package web_test

import (
	"database/sql"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"
)

// startForm posts the "Start a run" form, asserts the redirect to a run
// page and returns the run's id and the flash that page shows.
func startForm(t *testing.T, c *client, vals url.Values) (int64, string) {
	t.Helper()
	res, body := c.postForm("/runs", vals)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	loc := res.Header.Get("Location")
	id, err := strconv.ParseInt(strings.TrimPrefix(loc, "/runs/"), 10, 64)
	require.NoError(t, err, loc)
	flash := strings.TrimSpace(c.doc(loc, http.StatusOK).Find(testid("flash")).Text())
	return id, flash
}

// runDebounce reads the debounce columns and the input of run id from
// the runs view.
func runDebounce(t *testing.T, e *env, id int64) (key sql.NullString, at sql.NullTime, input string) {
	t.Helper()
	require.NoError(t, e.db.SQL.QueryRow(`SELECT debounce_key, debounce_at, input::text FROM `+e.st.Schema()+`.runs WHERE id = $1`, id).
		Scan(&key, &at, &input))
	return key, at, input
}

// runRows counts the rows of run_rows.
func runRows(t *testing.T, e *env) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM `+e.st.Schema()+`.run_rows`).Scan(&n))
	return n
}

// TestStartFormDebounce: the start form offers the debounce fields; a
// start with a debounce key makes a run marked with it, and a second
// start with the key and another input returns that run, with the new
// input, its flash saying the queued run was updated.
func TestStartFormDebounce(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, adminPW)
	form := c.doc("/runs", http.StatusOK).Find(testid("enqueue-form"))
	for _, id := range []string{"enqueue-debounce-key", "enqueue-debounce-wait", "enqueue-debounce-max-wait", "enqueue-singleton"} {
		require.Equal(t, 1, form.Find(testid(id)).Length(), id)
	}

	vals := func(input string) url.Values {
		return url.Values{"workflow": {"wf"}, "input": {input}, "debounce_key": {"k"}, "debounce_wait": {"1h"}, "debounce_max_wait": {"2h"}}
	}
	first, flash := startForm(t, c, vals(`{"n": 1}`))
	require.Equal(t, "Started run #"+strconv.FormatInt(first, 10)+" of wf.", flash)
	key, at, input := runDebounce(t, e, first)
	require.Equal(t, "k", key.String)
	require.True(t, at.Valid, "a debounced run has its start")
	require.JSONEq(t, `{"n": 1}`, input)

	again, flash := startForm(t, c, vals(`{"n": 2}`))
	require.Equal(t, first, again, "the queued run of the key, not a new one")
	require.Contains(t, flash, "No new run")
	require.Contains(t, flash, "updated with the new input")
	_, _, input = runDebounce(t, e, first)
	require.JSONEq(t, `{"n": 2}`, input)
	require.Equal(t, 1, runRows(t, e))
}

// TestStartFormSingleton: a start with a singleton key makes a run marked
// with it (no debounced start), and a second start with the key returns
// that run, with the new input, while it is queued.
func TestStartFormSingleton(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	require.NoError(t, e.eng.PauseQueue(t.Context(), "default")) // the run stays queued
	c := e.loggedIn(t, adminPW)

	vals := func(input string) url.Values {
		return url.Values{"workflow": {"wf"}, "input": {input}, "singleton": {"s"}}
	}
	first, flash := startForm(t, c, vals(`{"n": 1}`))
	require.Equal(t, "Started run #"+strconv.FormatInt(first, 10)+" of wf.", flash)
	key, at, input := runDebounce(t, e, first)
	require.Equal(t, "s", key.String)
	require.False(t, at.Valid, "a singleton does not move the start")
	require.JSONEq(t, `{"n": 1}`, input)

	again, flash := startForm(t, c, vals(`{"n": 2}`))
	require.Equal(t, first, again)
	require.Contains(t, flash, "updated with the new input")
	_, _, input = runDebounce(t, e, first)
	require.JSONEq(t, `{"n": 2}`, input)
	require.Equal(t, 1, runRows(t, e))
}

// TestStartFormRefused: a bad debounce or singleton shows the runs page
// again (400; 422 for an unknown workflow) with the start form open, the
// values as sent and the error beside the field at fault, and writes
// nothing: no run, and the queued run of the key keeps its input.
func TestStartFormRefused(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, adminPW)
	queued, _ := startForm(t, c, url.Values{"workflow": {"wf"}, "input": {`{"n": 1}`},
		"debounce_key": {"k"}, "debounce_wait": {"1h"}, "debounce_max_wait": {"2h"}})
	before := runRows(t, e)

	long := strings.Repeat("x", 513)
	for _, tc := range []struct {
		name   string
		vals   url.Values
		status int
		field  string // the field the error is shown beside
		msg    string
	}{
		{"bad wait", url.Values{"debounce_key": {"k"}, "debounce_wait": {"soon"}, "debounce_max_wait": {"1m"}},
			http.StatusBadRequest, "debounce.wait", `expected a duration like 2s or 5m, got "soon"`},
		{"bad max wait", url.Values{"debounce_key": {"k"}, "debounce_wait": {"5s"}, "debounce_max_wait": {"-"}},
			http.StatusBadRequest, "debounce.max_wait", "debounce.max_wait: expected a duration"},
		{"wait over max wait", url.Values{"debounce_key": {"k"}, "debounce_wait": {"2h"}, "debounce_max_wait": {"1h"}},
			http.StatusBadRequest, "debounce", "must satisfy 0 <= wait <= max wait"},
		{"waits without a key", url.Values{"debounce_wait": {"5s"}, "debounce_max_wait": {"1m"}},
			http.StatusBadRequest, "debounce", "key must be 1-512 bytes"},
		{"debounce key too long", url.Values{"debounce_key": {long}, "debounce_wait": {"5s"}, "debounce_max_wait": {"1m"}},
			http.StatusBadRequest, "debounce", "key must be 1-512 bytes"},
		{"singleton key too long", url.Values{"singleton": {long}},
			http.StatusBadRequest, "singleton", "key must be 1-512 bytes"},
		{"debounce and singleton", url.Values{"debounce_key": {"k"}, "debounce_wait": {"5s"}, "debounce_max_wait": {"1m"}, "singleton": {"s"}},
			http.StatusBadRequest, "singleton", "not with debounce"},
		{"unknown workflow", url.Values{"workflow": {"nosuch"}, "singleton": {"s"}},
			http.StatusUnprocessableEntity, "workflow", `unknown workflow "nosuch"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := tc.vals
			if !vals.Has("workflow") {
				vals.Set("workflow", "wf")
			}
			vals.Set("input", `{"n": 2}`)
			res, body := c.postForm("/runs", vals)
			require.Equal(t, tc.status, res.StatusCode, body)
			doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
			require.NoError(t, err)
			form := doc.Find(testid("enqueue-form"))
			require.Equal(t, 1, form.Length(), "the runs page, with its start form")
			_, open := form.Closest("details").Attr("open")
			require.True(t, open, "the start form is open")
			shown := form.Find(testid("field-error") + `[data-field="` + tc.field + `"]`)
			require.Equal(t, 1, shown.Length(), "an error beside %s: %s", tc.field, body)
			require.Contains(t, shown.Text(), tc.msg)
			require.Equal(t, vals.Get("debounce_key"), form.Find(testid("enqueue-debounce-key")).AttrOr("value", ""), "the values as sent")
			require.Equal(t, vals.Get("singleton"), form.Find(testid("enqueue-singleton")).AttrOr("value", ""))
			require.JSONEq(t, `{"n": 2}`, form.Find(testid("enqueue-input")).Text())

			require.Equal(t, before, runRows(t, e), "no run written")
			_, _, input := runDebounce(t, e, queued)
			require.JSONEq(t, `{"n": 1}`, input, "the queued run of the key is untouched")
		})
	}
}
