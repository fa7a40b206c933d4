package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// failedRuns enqueues n runs of wf whose task a fails, waits until they
// have failed, and lets later runs succeed again.
func (e *env) failedRuns(t *testing.T, n int) []int64 {
	t.Helper()
	e.failA.Store(true)
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = e.enqueue(t, map[string]int{"i": i})
	}
	for _, id := range ids {
		e.waitRun(t, id, store.RunFailed)
	}
	e.failA.Store(false)
	return ids
}

func TestRunsSelectionOnlyForAdmin(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	r1 := e.enqueue(t, nil)
	e.enqueue(t, nil)
	e.waitRun(t, r1, store.RunCompleted)

	admin := e.loggedIn(t, adminPW)
	doc := admin.doc("/runs", http.StatusOK)
	require.Equal(t, 1, doc.Find(testid("runs-select")).Length())
	boxes := doc.Find(testid("run-select"))
	require.Equal(t, 2, boxes.Length(), "a checkbox per row")
	require.Equal(t, "runs-select", boxes.First().AttrOr("form", ""), "the boxes belong to the selection form")
	require.Equal(t, 1, doc.Find(testid("select-page")).Length())
	require.Contains(t, doc.Find(testid("select-all")).Parent().Text(), "Select all 2 matching")
	frag := admin.doc("/fragments/runs", http.StatusOK)
	require.Equal(t, 2, frag.Find(testid("run-select")).Length(), "the live fragment keeps the boxes")

	ro := e.loggedIn(t, readonlyPW)
	for _, path := range []string{"/runs", "/fragments/runs"} {
		doc = ro.doc(path, http.StatusOK)
		require.Equal(t, 2, doc.Find(testid("run-row")).Length(), path)
		require.Zero(t, doc.Find(testid("run-select")).Length(), path)
		require.Zero(t, doc.Find(testid("select-page")).Length(), path)
		require.Zero(t, doc.Find(testid("runs-select")).Length(), path)
	}
	res, _ := ro.postForm("/runs/bulk", url.Values{"action": {"delete"}, "id": {strconv.FormatInt(r1, 10)}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	_, err := e.st.RunGet(context.Background(), r1)
	require.NoError(t, err, "a refused request changes nothing")
}

func TestBulkByIDs(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	failed := e.failedRuns(t, 2)
	done := e.enqueue(t, nil)
	e.waitRun(t, done, store.RunCompleted)
	c := e.loggedIn(t, adminPW)

	// The API: retry two failed runs and a completed one.
	res, body := c.postJSON("/api/runs/bulk", fmt.Sprintf(`{"action":"retry","ids":[%d,%d,%d]}`, failed[0], failed[1], done))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var out struct {
		Runs, Done, Skipped int
		DoneIDs             []int64 `json:"done_ids"`
		SkippedIDs          []int64 `json:"skipped_ids"`
		Message             string
	}
	require.NoError(t, json.Unmarshal([]byte(body), &out))
	require.Equal(t, 3, out.Runs)
	require.Equal(t, 2, out.Done)
	require.Equal(t, 1, out.Skipped)
	require.ElementsMatch(t, failed, out.DoneIDs)
	require.Equal(t, []int64{done}, out.SkippedIDs)
	require.Equal(t, "Retried 2 runs; 1 skipped because nothing failed or was cancelled in them.", out.Message)
	for _, id := range failed {
		e.waitRun(t, id, store.RunCompleted)
		require.Equal(t, store.StatusCompleted, e.task(t, id, "b").Status, "the skipped task ran too")
	}

	// The form: delete two of them and an unfinished run.
	e.failA.Store(true)
	live, err := e.eng.Enqueue(context.Background(), "wf", nil, engine.WithRunAt(time.Now().Add(time.Hour)))
	require.NoError(t, err)
	form := url.Values{"action": {"delete"}, "select": {"1"}, "q": {"i:0"},
		"id": {strconv.FormatInt(failed[0], 10), strconv.FormatInt(done, 10), strconv.FormatInt(live.ID, 10)}}
	res, body = c.postForm("/runs/bulk", form)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.Equal(t, "/runs?q=i%3A0", res.Header.Get("Location"), "back to the list as filtered")
	doc := c.doc(res.Header.Get("Location"), http.StatusOK)
	require.Equal(t, "Deleted 2 runs; 1 skipped because they had not finished.", strings.TrimSpace(doc.Find(testid("flash")).Text()))
	for _, id := range []int64{failed[0], done} {
		_, err := e.st.RunGet(context.Background(), id)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	_, err = e.st.RunGet(context.Background(), live.ID)
	require.NoError(t, err)

	// Cancel by the form.
	res, body = c.postForm("/runs/bulk", url.Values{"action": {"cancel"}, "id": {strconv.FormatInt(live.ID, 10), strconv.FormatInt(failed[1], 10)}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	e.waitRun(t, live.ID, store.RunCancelled)
	doc = c.doc("/runs", http.StatusOK)
	require.Equal(t, "Cancelled 1 run; 1 skipped because they had finished.", strings.TrimSpace(doc.Find(testid("flash")).Text()))
}

func TestBulkByIDsRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	failed := e.failedRuns(t, 1)
	c := e.loggedIn(t, adminPW)
	id := strconv.FormatInt(failed[0], 10)

	many := make([]string, web1001)
	for i := range many {
		many[i] = strconv.Itoa(i + 1)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"action":"retry","ids":[]}`, "ids: empty"},
		{`{"action":"retry","ids":[0]}`, "ids[0]: run id 0 must be positive"},
		{`{"action":"retry","ids":[` + id + `,-3]}`, "ids[1]: run id -3 must be positive"},
		{`{"action":"retry","ids":["x"]}`, "ids: expected a whole number"},
		{`{"action":"retry","ids":[1.5]}`, "ids: expected a whole number"},
		{`{"action":"retry","ids":[` + strings.Join(many, ",") + `]}`, "ids: 1001 runs; at most 1000"},
		{`{"action":"retry","ids":[` + id + `],"filter":{}}`, "give ids or filter, not both"},
		{`{"action":"explode","ids":[` + id + `]}`, `must be one of cancel, retry, requeue, delete`},
	} {
		res, body := c.postJSON("/api/runs/bulk", tc.body)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, tc.body)
		require.Contains(t, body, tc.want, tc.body)
	}
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"action": {"retry"}, "select": {"1"}}, "no runs selected"},
		{url.Values{"action": {"retry"}, "id": {"abc"}}, `run id &#34;abc&#34; must be a positive whole number`},
		{url.Values{"action": {"retry"}, "id": {id, "0"}}, "must be a positive whole number"},
		{url.Values{"action": {"retry"}, "id": many}, "1001 runs selected; at most 1000"},
		{url.Values{"action": {"explode"}, "id": {id}}, `must be one of cancel, retry, requeue, delete`},
	} {
		res, body := c.postForm("/runs/bulk", tc.form)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, tc.form.Encode())
		require.Contains(t, body, tc.want, tc.form.Encode())
	}
	require.Equal(t, store.StatusFailed, e.task(t, failed[0], "a").Status, "refused requests change nothing")
}

// web1001 is one more run than a bulk action takes.
const web1001 = 1001

func TestRetryWholeRun(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	failed := e.failedRuns(t, 2)
	require.Equal(t, store.StatusSkipped, e.task(t, failed[0], "b").Status)
	c := e.loggedIn(t, adminPW)

	doc := c.doc(fmt.Sprintf("/runs/%d", failed[0]), http.StatusOK)
	require.Equal(t, 1, doc.Find(testid("run-retry")).Length(), "a failed run offers Retry run")

	res, body := c.postForm(fmt.Sprintf("/runs/%d/retry", failed[0]), nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	run := e.waitRun(t, failed[0], store.RunCompleted)
	require.Equal(t, 0, run.FailedTasks)
	for _, name := range []string{"a", "b"} {
		tk := e.task(t, failed[0], name)
		require.Equal(t, store.StatusCompleted, tk.Status, name)
	}
	evs, err := e.st.EventListByRun(context.Background(), failed[0])
	require.NoError(t, err)
	var reset bool
	for _, ev := range evs {
		reset = reset || ev.From != nil && *ev.From == store.StatusSkipped && ev.To == store.StatusNotStarted
	}
	require.True(t, reset, "the skipped task went back to not_started, with an event")
	doc = c.doc(fmt.Sprintf("/runs/%d", failed[0]), http.StatusOK)
	require.Zero(t, doc.Find(testid("run-retry")).Length(), "nothing left to retry")
	require.Contains(t, doc.Find(testid("flash")).Text(), "retried")

	// The API, and a run with nothing to retry.
	res, body = c.postJSON(fmt.Sprintf("/api/runs/%d/retry", failed[1]), "")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	e.waitRun(t, failed[1], store.RunCompleted)
	res, body = c.postJSON(fmt.Sprintf("/api/runs/%d/retry", failed[1]), "")
	require.Equal(t, http.StatusConflict, res.StatusCode, body)
	require.Contains(t, body, "no failed or cancelled task to retry")
	res, _ = c.postJSON("/api/runs/99999999/retry", "")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
}

func TestRunsSearch(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	failed := e.failedRuns(t, 1)[0] // input {"i": 0}, no output
	keyed, err := e.eng.Enqueue(context.Background(), "wf", map[string]any{"order": map[string]any{"id": 7}}, engine.WithKey("order-7"))
	require.NoError(t, err)
	plain := e.enqueue(t, map[string]any{"customer": "acme"})
	e.waitRun(t, keyed.ID, store.RunCompleted)
	e.waitRun(t, plain, store.RunCompleted)
	c := e.loggedIn(t, adminPW)

	rows := func(q string) []int64 {
		t.Helper()
		doc := c.doc("/runs?q="+url.QueryEscape(q), http.StatusOK)
		var ids []int64
		doc.Find(testid("run-row")).Each(func(_ int, s *goquery.Selection) {
			id, err := strconv.ParseInt(s.AttrOr("data-run-id", ""), 10, 64)
			require.NoError(t, err)
			ids = append(ids, id)
		})
		// The live fragment keeps the search.
		live := doc.Find(testid("runs-live")).AttrOr("data-refresh", "")
		require.Contains(t, live, "q="+url.QueryEscape(q), q)
		return ids
	}
	require.Equal(t, []int64{plain}, rows(strconv.FormatInt(plain, 10)))
	require.Equal(t, []int64{failed}, rows("#"+strconv.FormatInt(failed, 10)))
	require.Equal(t, []int64{keyed.ID}, rows("key:order-7"))
	require.Empty(t, rows("key:order-8"))
	require.ElementsMatch(t, []int64{keyed.ID, plain}, rows("output.a:1"), "any task's output")
	require.Equal(t, []int64{plain}, rows("output.b:2 customer:acme"))
	require.Empty(t, rows("output.a:2"))
	require.Equal(t, []int64{keyed.ID}, rows("input.order.id:7"))
	require.Equal(t, []int64{keyed.ID}, rows("order.id:7"))
	require.Equal(t, []int64{failed}, rows("input.i:*"), "a field that exists")
	require.ElementsMatch(t, []int64{keyed.ID, plain}, rows("output.b:*"))
	require.Equal(t, []int64{keyed.ID}, rows("#"+strconv.FormatInt(keyed.ID, 10)+" key:order-7"))

	// The JSON API takes the same search.
	res, body := c.get("/api/runs?q=" + url.QueryEscape("output.a:1 key:order-7"))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, fmt.Sprintf(`"id": %d`, keyed.ID))
	require.NotContains(t, body, fmt.Sprintf(`"id": %d,`, plain))

	// Bad syntax is a message beside the search box, not a 500.
	for q, want := range map[string]string{
		"#x":          `search term "#x": write key:value`,
		"output:1":    "search term output: name a field, as in output.total:42",
		"#1 #2":       "one run id at most",
		"output..a:1": "empty key",
		"key:a key:b": "one key at most",
		"input.a:\"x": "unclosed quote",
	} {
		doc := c.doc("/runs?q="+url.QueryEscape(q), http.StatusBadRequest)
		errEl := doc.Find(testid("filter-error"))
		require.Equal(t, "q", errEl.AttrOr("data-field", ""), q)
		require.Contains(t, errEl.Text(), want, q)
		res, body := c.get("/api/runs?q=" + url.QueryEscape(q))
		require.Equal(t, http.StatusBadRequest, res.StatusCode, q)
		require.Contains(t, body, strings.ReplaceAll(want, `"`, `\"`), q)
	}
}

// TestBulkAPIDeleteByFilter: POST /api/runs/bulk deletes the finished
// runs a filter matches; a dry run by filter or by ids only counts. The
// contract check holds each answer (filter-only tasks and capped, the
// done and skipped fields only when it acted) against openapi.json.
func TestBulkAPIDeleteByFilter(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	failed := e.failedRuns(t, 2)
	c := e.loggedIn(t, adminPW)

	type answer struct {
		Action     string
		Runs       int
		Tasks      *int
		Capped     *bool
		DryRun     bool    `json:"dry_run"`
		Done       *int    `json:"done"`
		DoneIDs    []int64 `json:"done_ids"`
		SkippedIDs []int64 `json:"skipped_ids"`
		Message    string
	}
	post := func(body string) answer {
		t.Helper()
		res, out := c.postJSON("/api/runs/bulk", body)
		require.Equal(t, http.StatusOK, res.StatusCode, out)
		var a answer
		require.NoError(t, json.Unmarshal([]byte(out), &a))
		return a
	}

	a := post(`{"action":"delete","filter":{"status":"failed"},"dry_run":true}`)
	require.Equal(t, 2, a.Runs)
	require.NotNil(t, a.Tasks)
	require.Zero(t, *a.Tasks)
	require.NotNil(t, a.Capped)
	require.False(t, *a.Capped)
	require.Nil(t, a.Done, "a dry run does nothing")

	a = post(fmt.Sprintf(`{"action":"delete","ids":[%d],"dry_run":true}`, failed[0]))
	require.Equal(t, 1, a.Runs)
	require.Nil(t, a.Tasks, "tasks and capped come with a filter only")
	require.Nil(t, a.Capped)
	_, err := e.st.RunGet(context.Background(), failed[0])
	require.NoError(t, err, "a dry run deletes nothing")

	a = post(`{"action":"delete","filter":{"status":"failed"}}`)
	require.Equal(t, "delete", a.Action)
	require.NotNil(t, a.Done)
	require.Equal(t, 2, *a.Done)
	require.ElementsMatch(t, failed, a.DoneIDs)
	require.Empty(t, a.SkippedIDs)
	require.Equal(t, "Deleted 2 runs.", a.Message)
	for _, id := range failed {
		_, err := e.st.RunGet(context.Background(), id)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
}

// TestBulkNeedsASelection: a bulk action, on the API or the site's form,
// dry run or not, that names no runs (no ids, no filter field, no
// "all": true / all=1) is refused with a 400 saying what is missing, and
// changes nothing; with all it acts on every run it applies to, and the
// site's confirm step asks for all=1 again.
func TestBulkNeedsASelection(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	failed := e.failedRuns(t, 2)
	live, err := e.eng.Enqueue(ctx, "wf", nil, engine.WithRunAt(time.Now().Add(time.Hour)))
	require.NoError(t, err)
	liveStatus := e.waitRun(t, live.ID, store.RunPending).Status
	c := e.loggedIn(t, adminPW)
	before := fingerprint(t, e.db.SQL)

	unchanged := func(what string) {
		t.Helper()
		for _, id := range failed {
			run, err := e.st.RunGet(ctx, id)
			require.NoError(t, err, "%s: run %d is still there", what, id)
			require.Equal(t, store.RunFailed, run.Status, what)
			require.Equal(t, store.StatusFailed, e.task(t, id, "a").Status, what)
		}
		run, err := e.st.RunGet(ctx, live.ID)
		require.NoError(t, err, what)
		require.Equal(t, liveStatus, run.Status, "%s: the unfinished run is not cancelled", what)
		require.Equal(t, before, fingerprint(t, e.db.SQL), "%s: a refused request changed rows", what)
	}

	for _, act := range []string{"cancel", "retry", "requeue", "delete"} {
		want := fmt.Sprintf(`bulk %s needs a selection: "ids", a "filter", or "all": true`, act)
		for _, body := range []string{
			`{"action":"` + act + `"}`,
			`{"action":"` + act + `","dry_run":true}`,
			`{"action":"` + act + `","dry_run":false}`,
			`{"action":"` + act + `","all":false}`,
			`{"action":"` + act + `","filter":{}}`,
			`{"action":"` + act + `","filter":{"status":"","q":"  "},"dry_run":true}`,
		} {
			res, out := c.postJSON("/api/runs/bulk", body)
			require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s: %s", body, out)
			var msg struct{ Error string }
			require.NoError(t, json.Unmarshal([]byte(out), &msg))
			require.Contains(t, msg.Error, want, body)
		}
		res, out := c.postJSON("/api/runs/bulk", fmt.Sprintf(`{"action":%q,"ids":[%d],"all":true}`, act, failed[0]))
		require.Equal(t, http.StatusBadRequest, res.StatusCode, out)
		require.Contains(t, out, "give ids or all, not both")
		unchanged("API " + act)

		want = fmt.Sprintf("bulk %s needs a selection: runs ticked on the list (id), a filter, or all=1 (every run)", act)
		for _, form := range []url.Values{
			{"action": {act}},
			{"action": {act}, "confirm": {"yes"}},
			{"action": {act}, "confirm": {"yes"}, "all": {"0"}, "workflow": {""}, "status": {""}, "from": {""}, "to": {""}, "q": {" "}},
		} {
			res, out := c.postForm("/runs/bulk", form)
			require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s: %s", form.Encode(), out)
			require.Contains(t, out, want, form.Encode())
		}
		unchanged("form " + act)
	}

	// "all": true selects every run the action applies to.
	type answer struct {
		Runs    int
		Tasks   *int
		Done    *int
		DoneIDs []int64 `json:"done_ids"`
	}
	post := func(body string) answer {
		t.Helper()
		res, out := c.postJSON("/api/runs/bulk", body)
		require.Equal(t, http.StatusOK, res.StatusCode, out)
		var a answer
		require.NoError(t, json.Unmarshal([]byte(out), &a))
		return a
	}
	a := post(`{"action":"retry","all":true,"dry_run":true}`)
	require.Equal(t, 2, a.Runs)
	require.Equal(t, 2, *a.Tasks)
	require.Nil(t, a.Done)
	a = post(`{"action":"cancel","all":true,"dry_run":true}`)
	require.Equal(t, 1, a.Runs)
	unchanged("dry runs")
	a = post(`{"action":"delete","all":true,"filter":{"status":"completed"},"dry_run":true}`)
	require.Equal(t, 0, a.Runs, "all with a filter is every run it matches")
	a = post(`{"action":"delete","all":true}`)
	require.Equal(t, 2, *a.Done)
	require.ElementsMatch(t, failed, a.DoneIDs)
	for _, id := range failed {
		_, err := e.st.RunGet(ctx, id)
		require.ErrorIs(t, err, store.ErrNotFound)
	}
	run, err := e.st.RunGet(ctx, live.ID)
	require.NoError(t, err, "delete takes finished runs only")
	require.Equal(t, liveStatus, run.Status)

	// The site: "Select all matching" with no filter set leads to a
	// confirm step that asks for all=1 itself.
	sel := url.Values{"action": {"cancel"}, "select": {"1"}, "all": {"1"}, "workflow": {""}, "status": {""}, "from": {""}, "to": {""}, "q": {""}}
	res, body := c.postForm("/runs/bulk", sel)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	require.NoError(t, err)
	require.Equal(t, "1", doc.Find(testid("confirm-runs")).Text())
	require.Contains(t, doc.Find(testid("confirm")).Text(), "all of them: no filter is set")
	box := doc.Find(`form ` + testid("confirm-all"))
	require.Equal(t, 1, box.Length(), "the confirm form asks for all")
	require.Equal(t, "all", box.AttrOr("name", ""))
	require.Equal(t, "1", box.AttrOr("value", ""))
	_, required := box.Attr("required")
	require.True(t, required)
	confirm := url.Values{"action": {"cancel"}, "confirm": {"yes"}}
	doc.Find(`form input[type="hidden"]`).Each(func(_ int, s *goquery.Selection) {
		if n := s.AttrOr("name", ""); n != "csrf_token" {
			confirm.Set(n, s.AttrOr("value", ""))
		}
	})
	res, body = c.postForm("/runs/bulk", confirm)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, "confirmed without ticking all: %s", body)
	run, err = e.st.RunGet(ctx, live.ID)
	require.NoError(t, err)
	require.Equal(t, liveStatus, run.Status, "not cancelled")
	confirm.Set("all", "1")
	res, body = c.postForm("/runs/bulk", confirm)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	e.waitRun(t, live.ID, store.RunCancelled)

	// With a filter set, the confirm step needs no more.
	res, body = c.postForm("/runs/bulk", url.Values{"action": {"delete"}, "status": {"cancelled"}})
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.NotContains(t, body, `data-testid="confirm-all"`)
	require.Contains(t, body, "matching the filter")
}
