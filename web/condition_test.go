package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/web"
)

// TestTaskPageShowsConditionAndChecksNow: a task parked in DeferUntil
// shows its condition's interval and last check on its page, fragment
// and API; admins get a Check now button (form and API) that makes the
// engine check the condition at once, read-only logins do not; a task
// that is not deferred is refused; a site whose engine does not hold the
// task says its last check is not known there.
func TestTaskPageShowsConditionAndChecksNow(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	var open atomic.Bool
	var mu sync.Mutex
	calls := map[int64]int{} // condition checks per task
	checks := func(id int64) int {
		mu.Lock()
		defer mu.Unlock()
		return calls[id]
	}
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "cond", Tasks: []engine.Task{{Name: "t",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			// The interval is an hour: only Check now checks it again.
			return h.DeferUntil(ctx, func(context.Context) bool {
				mu.Lock()
				calls[h.TaskID()]++
				mu.Unlock()
				return open.Load()
			}, time.Hour)
		}}}}))
	// Two tasks: the form wakes one, the API the other (a wake may
	// check twice: at once here, and again when its NOTIFY comes back).
	var runs []int64
	var tasks []int64
	for range 2 {
		run, err := e.eng.Enqueue(ctx, "cond", nil)
		require.NoError(t, err)
		runs = append(runs, run.ID)
		tasks = append(tasks, e.task(t, run.ID, "t").ID)
	}
	for _, id := range tasks {
		eventually(t, 15*time.Second, "the task deferred", func() bool {
			tk, err := e.st.TaskGet(ctx, id)
			require.NoError(t, err)
			return tk.Status == store.StatusDeferred
		})
		require.Equal(t, 1, checks(id), "checked once, before parking")
	}
	task := mustTask(t, e, tasks[0])
	page := "/tasks/" + strconv.FormatInt(task.ID, 10)
	admin := e.loggedIn(t, adminPW)

	for _, path := range []string{page, "/fragments" + page} {
		doc := admin.doc(path, http.StatusOK)
		cond := doc.Find(testid("task-condition"))
		require.Equal(t, 1, cond.Length(), path)
		text := strings.Join(strings.Fields(cond.Text()), " ")
		require.Contains(t, text, "Waits for its condition (DeferUntil): checked every 1 h; last check ", path)
		last := cond.Find(testid("condition-last-check")).Find("time[data-rel]")
		require.Equal(t, 1, last.Length(), "the last check is a relative time: %s", path)
		at, err := time.Parse(time.RFC3339Nano, last.AttrOr("datetime", ""))
		require.NoError(t, err)
		require.WithinDuration(t, time.Now(), at, time.Minute)
		require.Equal(t, 1, doc.Find(testid("task-actions")).Find(testid("task-wake")).Length(), "admins get Check now: %s", path)
	}
	ro := e.loggedIn(t, readonlyPW)
	doc := ro.doc(page, http.StatusOK)
	require.Equal(t, 1, doc.Find(testid("task-condition")).Length(), "read-only logins see the condition")
	require.Zero(t, doc.Find(testid("task-wake")).Length(), "but get no button")
	res, body := ro.postForm(page+"/wake", nil)
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	res, body = ro.postJSON("/api"+page+"/wake", "")
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)

	// The API says it too.
	res, body = admin.get("/api" + page)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var detail struct {
		Task      store.Task `json:"task"`
		Condition *struct {
			EveryMs   int64      `json:"every_ms"`
			Since     *time.Time `json:"since"`
			LastCheck *time.Time `json:"last_check"`
			HeldBy    *int64     `json:"held_by"`
			Text      string     `json:"text"`
		} `json:"condition"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &detail))
	require.NotNil(t, detail.Task.WaitEveryMs, body)
	require.EqualValues(t, time.Hour.Milliseconds(), *detail.Task.WaitEveryMs)
	require.NotNil(t, detail.Condition, body)
	require.EqualValues(t, time.Hour.Milliseconds(), detail.Condition.EveryMs)
	require.NotNil(t, detail.Condition.Since)
	require.NotNil(t, detail.Condition.LastCheck, "the site's engine holds the task")
	require.Equal(t, mustTask(t, e, task.ID).WorkerID, detail.Condition.HeldBy)
	require.Contains(t, detail.Condition.Text, "checked every 1 h; last check ")

	// Check now, as a form: 303 back to the page, and the engine checks.
	res, body = admin.postForm(page+"/wake", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	eventually(t, 10*time.Second, "the form's check", func() bool { return checks(tasks[0]) >= 2 })
	// And through the API.
	res, body = admin.postJSON("/api/tasks/"+strconv.FormatInt(tasks[1], 10)+"/wake", "")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, "checks what it waits for now")
	eventually(t, 10*time.Second, "the API's check", func() bool { return checks(tasks[1]) >= 2 })

	// A site whose engine does not hold the task: not known there.
	other, err := engine.New(e.db.SQL, engine.Config{DatabaseURL: e.db.URL, Logger: testLogger(t)})
	require.NoError(t, err)
	srv, err := web.New(web.Config{Engine: other, Reads: newStore(t, e.db.SQL, ""), ListenAddr: "127.0.0.1:0", Logger: testLogger(t)})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, page, nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	odoc, err := goquery.NewDocumentFromReader(rec.Body)
	require.NoError(t, err)
	worker := strconv.FormatInt(*mustTask(t, e, task.ID).WorkerID, 10)
	require.Equal(t, "last check: not known here (held by worker "+worker+")",
		strings.Join(strings.Fields(odoc.Find(testid("condition-last-check")).Text()), " "))

	// Once the condition holds, the task finishes: nothing is left to
	// check, and a wake is refused.
	open.Store(true)
	for i, id := range tasks {
		res, body = admin.postJSON("/api/tasks/"+strconv.FormatInt(id, 10)+"/wake", "")
		// 409 when a late NOTIFY of an earlier wake checked it first.
		require.Contains(t, []int{http.StatusOK, http.StatusConflict}, res.StatusCode, body)
		e.waitRun(t, runs[i], store.RunCompleted)
	}
	require.Zero(t, admin.doc(page, http.StatusOK).Find(testid("task-condition")).Length(), "a finished task waits for nothing")
	for _, path := range []string{"/api" + page + "/wake", "/api/tasks/99999999/wake", "/api/tasks/abc/wake"} {
		res, body = admin.postJSON(path, "")
		want := map[string]int{"/api" + page + "/wake": http.StatusConflict, "/api/tasks/99999999/wake": http.StatusNotFound,
			"/api/tasks/abc/wake": http.StatusBadRequest}[path]
		require.Equal(t, want, res.StatusCode, "%s: %s", path, body)
	}
	res, body = admin.postJSON("/api"+page+"/wake", "")
	require.Contains(t, body, "completed, not deferred")
	res, body = admin.postForm(page+"/wake", nil)
	require.Equal(t, http.StatusConflict, res.StatusCode, body)
}

func mustTask(t *testing.T, e *env, id int64) *store.Task {
	t.Helper()
	tk, err := e.st.TaskGet(context.Background(), id)
	require.NoError(t, err)
	return tk
}
