package web_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/web"
)

func TestNewRefusesOpenSiteOffLoopback(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("postgres", "postgres://127.0.0.1:1/none")
	require.NoError(t, err)
	defer db.Close()
	eng, err := engine.New(db, engine.Config{})
	require.NoError(t, err)
	for _, tc := range []struct {
		addr, admin, readonly string
		ok                    bool
	}{
		{addr: "127.0.0.1:8080", ok: true},
		{addr: "127.1.2.3:8080", ok: true},
		{addr: "[::1]:8080", ok: true},
		{addr: "localhost:8080", ok: true},
		{addr: ":8080"},
		{addr: "0.0.0.0:8080"},
		{addr: "[::]:8080"},
		{addr: "10.1.2.3:8080"},
		{addr: "example.com:80"},
		{addr: ""},
		{addr: "0.0.0.0:8080", admin: "pw", ok: true},
		{addr: "127.0.0.1:8080", readonly: "ro"},
		{addr: "0.0.0.0:8080", admin: "pw", readonly: "pw"},
	} {
		_, err := web.New(web.Config{Engine: eng, Reads: newStore(t, db, ""), ListenAddr: tc.addr, AdminPassword: tc.admin, ReadonlyPassword: tc.readonly})
		if tc.ok {
			require.NoError(t, err, "%+v", tc)
		} else {
			require.ErrorIs(t, err, web.ErrInsecureConfig, "%+v", tc)
		}
	}
}

// TestNewHeldHorizon: the hold threshold of Needs attention defaults to
// a minute, takes a configured value and refuses a negative one.
func TestNewHeldHorizon(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("postgres", "postgres://127.0.0.1:1/none")
	require.NoError(t, err)
	defer db.Close()
	eng, err := engine.New(db, engine.Config{})
	require.NoError(t, err)
	cfg := web.Config{Engine: eng, Reads: newStore(t, db, ""), ListenAddr: "127.0.0.1:0"}
	srv, err := web.New(cfg)
	require.NoError(t, err)
	require.Equal(t, 60*time.Second, web.HeldHorizon(srv))
	require.Equal(t, 60*time.Second, web.DefaultHeldHorizon)
	cfg.HeldHorizon = 5 * time.Minute
	srv, err = web.New(cfg)
	require.NoError(t, err)
	require.Equal(t, 5*time.Minute, web.HeldHorizon(srv))
	cfg.HeldHorizon = -time.Second
	_, err = web.New(cfg)
	require.ErrorContains(t, err, "HeldHorizon")
}

func TestLoginRequired(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.client(t)

	res, _ := c.get("/runs?status=failed")
	require.Equal(t, http.StatusFound, res.StatusCode)
	require.Equal(t, "/login?next="+url.QueryEscape("/runs?status=failed"), res.Header.Get("Location"))

	res, body := c.get("/api/runs")
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.Contains(t, res.Header.Get("Content-Type"), "application/json")
	require.Contains(t, body, `"error"`)
	require.Equal(t, `Basic realm="cairn"`, res.Header.Get("WWW-Authenticate"), "API clients are told how to log in")
	req, _ := http.NewRequest(http.MethodGet, e.ts.URL+"/api/runs", nil)
	req.SetBasicAuth("", "wrong")
	res, _ = c.do(req)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.Equal(t, `Basic realm="cairn"`, res.Header.Get("WWW-Authenticate"))
	res, _ = c.get("/metrics")
	require.Empty(t, res.Header.Get("WWW-Authenticate"), "only the API asks for Basic credentials")

	for _, p := range []string{"/ws", "/metrics", "/fragments/overview"} {
		res, _ = c.get(p)
		require.Equal(t, http.StatusUnauthorized, res.StatusCode, p)
	}
	res, _ = c.postForm("/queues/default/pause", nil)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)

	res, body = c.get("/healthz")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Equal(t, "ok", body)
	res, _ = c.get("/static/app.css")
	require.Equal(t, http.StatusOK, res.StatusCode)
	res, _ = c.get("/static/")
	require.Equal(t, http.StatusNotFound, res.StatusCode)

	doc := c.doc("/login?next=/queues", http.StatusOK)
	require.Equal(t, 1, doc.Find(testid("login-form")).Length())
}

func TestLogin(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.client(t)

	res, body := c.postForm("/login", url.Values{"password": {"nope"}, "next": {"/queues"}})
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	require.Contains(t, body, `data-testid="login-error"`)
	require.Empty(t, res.Cookies())
	res, _ = c.get("/")
	require.Equal(t, http.StatusFound, res.StatusCode)

	res, _ = c.postForm("/login", url.Values{"password": {adminPW}, "next": {"/queues"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/queues", res.Header.Get("Location"))
	var cookie *http.Cookie
	for _, ck := range res.Cookies() {
		if ck.Name == "cairn_session" {
			cookie = ck
		}
	}
	require.NotNil(t, cookie)
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	doc := c.doc("/", http.StatusOK)
	require.Equal(t, "admin", doc.Find(testid("role")).Text())

	// An open redirect is not followed.
	res, _ = c.postForm("/login", url.Values{"password": {adminPW}, "next": {"//evil.example/x"}})
	require.Equal(t, "/", res.Header.Get("Location"))

	// A forged cookie is no session.
	forged := e.client(t)
	u, _ := url.Parse(e.ts.URL)
	forged.hc.Jar.SetCookies(u, []*http.Cookie{{Name: "cairn_session", Value: "admin.99999999999.x.bad"}})
	res, _ = forged.get("/")
	require.Equal(t, http.StatusFound, res.StatusCode)

	// Logout ends the session in the browser.
	c.csrf, _ = c.doc("/", http.StatusOK).Find(`meta[name="csrf-token"]`).Attr("content")
	res, _ = c.postForm("/logout", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = c.get("/")
	require.Equal(t, http.StatusFound, res.StatusCode)
}

func TestReadonlyCannotChangeState(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, readonlyPW)

	doc := c.doc("/queues", http.StatusOK)
	require.Equal(t, 1, doc.Find(testid("queue-row")).Length())
	require.Zero(t, doc.Find(testid("queue-pause")).Length(), "no action buttons for read-only")

	res, body := c.postForm("/queues/default/pause", nil)
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	res, body = c.postJSON("/api/queues/default/pause", "")
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	require.Contains(t, body, "read-only")
	res, _ = c.postForm("/runs/bulk", url.Values{"action": {"cancel"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)

	q, err := e.st.QueueGet(context.Background(), "default")
	require.NoError(t, err)
	require.False(t, q.Paused)

	// Reads work, also through the API with Basic credentials.
	req, _ := http.NewRequest(http.MethodGet, e.ts.URL+"/api/queues", nil)
	req.SetBasicAuth("", readonlyPW)
	res, _ = e.client(t).do(req)
	require.Equal(t, http.StatusOK, res.StatusCode)
	req, _ = http.NewRequest(http.MethodPost, e.ts.URL+"/api/queues/default/pause", nil)
	req.SetBasicAuth("", readonlyPW)
	res, _ = e.client(t).do(req)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
}

func TestCSRF(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, adminPW)
	ctx := context.Background()

	res, _ := c.postForm("/queues/default/pause", url.Values{"csrf_token": {""}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	res, _ = c.postForm("/queues/default/pause", url.Values{"csrf_token": {"forged"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	// Another session's token does not fit this session.
	other := e.loggedIn(t, adminPW)
	res, _ = c.postForm("/queues/default/pause", url.Values{"csrf_token": {other.csrf}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	// The API with the session cookie needs the header too.
	req, _ := http.NewRequest(http.MethodPost, e.ts.URL+"/api/queues/default/pause", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/json")
	res, _ = c.do(req)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	// A cross-origin request is refused even with the token.
	req, _ = http.NewRequest(http.MethodPost, e.ts.URL+"/queues/default/pause", strings.NewReader("csrf_token="+url.QueryEscape(c.csrf)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "https://evil.example")
	res, _ = c.do(req)
	require.Equal(t, http.StatusForbidden, res.StatusCode)

	q, err := e.st.QueueGet(ctx, "default")
	require.NoError(t, err)
	require.False(t, q.Paused, "no refused request changed anything")

	req, _ = http.NewRequest(http.MethodPost, e.ts.URL+"/queues/default/pause", strings.NewReader("csrf_token="+url.QueryEscape(c.csrf)))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.ts.URL)
	res, _ = c.do(req)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
}

func TestPagesRender(t *testing.T) {
	t.Parallel()
	e := setup(t, func(ec *engine.Config, _ *web.Config) {
		ec.Schedules = []engine.Schedule{{Name: "nightly", Expression: "30 2 * * *", Timezone: "Europe/Berlin", Workflow: "wf", Input: map[string]string{"from": "cron"}}}
	})
	runID := e.enqueue(t, map[string]any{"customer": "acme", "a": 0})
	e.waitRun(t, runID, store.RunCompleted)
	c := e.loggedIn(t, adminPW)

	doc := c.doc("/", http.StatusOK)
	for _, id := range []string{"overview-live", "state-counts", "throughput-chart", "workers-table", "overview-queues", "live-status"} {
		require.Equal(t, 1, doc.Find(testid(id)).Length(), id)
	}
	require.Equal(t, "2", strings.TrimSpace(doc.Find(testid("count-completed")+" .n").Text()))
	require.Equal(t, "0/4", doc.Find(testid("worker-row")+" "+testid("slot-use")).Text(), "the worker and its slot use")
	require.Contains(t, doc.Find(testid("throughput-chart")).Text(), "2 completed, 0 failed")

	doc = c.doc("/runs", http.StatusOK)
	require.Equal(t, 1, doc.Find(testid("runs-filter")).Length())
	require.Equal(t, 1, doc.Find(testid("run-row")).Length())
	require.Equal(t, strconv.FormatInt(runID, 10), doc.Find(testid("run-row")).AttrOr("data-run-id", ""))
	require.Equal(t, 1, doc.Find(testid("runs-select")).Length())

	doc = c.doc(fmt.Sprintf("/runs/%d", runID), http.StatusOK)
	require.Equal(t, 1, doc.Find(testid("dag")).Length())
	require.Equal(t, 2, doc.Find(testid("dag-node")).Length())
	require.Equal(t, 1, doc.Find(testid("dag-edge")).Length())
	require.Equal(t, 2, doc.Find(`[data-testid="dag-node"].st-completed`).Length())
	require.Equal(t, 2, doc.Find(testid("task-row")).Length())
	require.GreaterOrEqual(t, doc.Find(testid("event")).Length(), 5, "running/completed per task, and the dependent made ready")
	require.Contains(t, doc.Find(testid("run-input")).Text(), `"customer": "acme"`)
	require.Contains(t, doc.Find(testid("run-status")).Text(), "completed")

	b := e.task(t, runID, "b")
	doc = c.doc(fmt.Sprintf("/tasks/%d", b.ID), http.StatusOK)
	require.Contains(t, doc.Find(testid("task-status")).Text(), "completed")
	require.Equal(t, 1, doc.Find(testid("attempt")).Length())
	require.Contains(t, doc.Find(testid("task-output")).Text(), `"b": 2`)
	ctxText := doc.Find(testid("task-context")).Text()
	require.Contains(t, ctxText, `"customer": "acme"`)
	require.Contains(t, ctxText, `"a": 1`, "the dependency's output wins over the input")
	require.Equal(t, 1, doc.Find(testid("task-deps")+" li").Length())
	a := e.task(t, runID, "a")
	doc = c.doc(fmt.Sprintf("/tasks/%d", a.ID), http.StatusOK)
	require.Contains(t, doc.Find(testid("attempt-log")).Text(), "working on a")

	doc = c.doc("/workers", http.StatusOK)
	require.Equal(t, 1, doc.Find(testid("worker-row")).Length())
	doc = c.doc("/queues", http.StatusOK)
	require.Equal(t, "default", doc.Find(testid("queue-row")).AttrOr("data-queue", ""))
	require.Equal(t, 1, doc.Find(testid("queue-pause")).Length())
	doc = c.doc("/schedules", http.StatusOK)
	require.Equal(t, "nightly", doc.Find(testid("schedule-row")).AttrOr("data-schedule", ""))
	require.Equal(t, 5, doc.Find(testid("next-fire")).Length())
	require.Contains(t, doc.Find(testid("next-fire")).First().Text(), "02:30")

	// Fragments render the live parts alone.
	for _, p := range []string{"/fragments/overview", "/fragments/runs", fmt.Sprintf("/fragments/runs/%d", runID),
		fmt.Sprintf("/fragments/tasks/%d", b.ID), "/fragments/workers", "/fragments/queues"} {
		res, body := c.get(p)
		require.Equal(t, http.StatusOK, res.StatusCode, p)
		require.NotContains(t, body, "<html", p)
	}

	// The JSON API shows the same.
	for path, want := range map[string]string{
		"/api/overview":                          `"completed": 2`,
		"/api/workflows":                         `"wf"`,
		fmt.Sprintf("/api/runs/%d", runID):       `"status": "completed"`,
		fmt.Sprintf("/api/tasks/%d", b.ID):       `"context"`,
		"/api/workers":                           `"slots": 4`,
		"/api/queues":                            `"name": "default"`,
		"/api/schedules":                         `"name": "nightly"`,
		"/api/runs?workflow=wf&status=completed": fmt.Sprintf(`"id": %d`, runID),
	} {
		res, body := c.get(path)
		require.Equal(t, http.StatusOK, res.StatusCode, path)
		require.Contains(t, res.Header.Get("Content-Type"), "application/json", path)
		require.Contains(t, body, want, path)
	}

	// Security headers.
	res, _ := c.get("/")
	require.Contains(t, res.Header.Get("Content-Security-Policy"), "default-src 'self'")
	require.Equal(t, "DENY", res.Header.Get("X-Frame-Options"))
	require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
}

func TestRunsFilterSearchAndPaging(t *testing.T) {
	t.Parallel()
	e := setup(t, func(ec *engine.Config, _ *web.Config) { ec.NoWorker = true })
	ctx := context.Background()
	var ps []engine.EnqueueParams
	for i := range 7 {
		ps = append(ps, engine.EnqueueParams{Workflow: "wf", Input: map[string]any{"n": i, "customer": fmt.Sprintf("c%d", i%2)}})
	}
	_, err := e.eng.EnqueueMany(ctx, ps)
	require.NoError(t, err)
	c := e.loggedIn(t, adminPW)

	type page struct {
		Runs []struct {
			ID    int64           `json:"id"`
			Input json.RawMessage `json:"input"`
		} `json:"runs"`
		Next string `json:"next_cursor"`
		Prev string `json:"prev_cursor"`
	}
	get := func(path string) page {
		t.Helper()
		res, body := c.get(path)
		require.Equal(t, http.StatusOK, res.StatusCode, body)
		var p page
		require.NoError(t, json.Unmarshal([]byte(body), &p))
		return p
	}
	seen := map[int64]bool{}
	var pages []page
	for cursor, first := "", true; first || cursor != ""; first = false {
		p := get("/api/runs?limit=3&after=" + url.QueryEscape(cursor))
		for _, r := range p.Runs {
			require.False(t, seen[r.ID], "run %d twice", r.ID)
			seen[r.ID] = true
		}
		pages = append(pages, p)
		cursor = p.Next
	}
	require.Len(t, seen, 7)
	require.Len(t, pages, 3)
	require.Len(t, pages[2].Runs, 1)
	require.Empty(t, pages[0].Prev)
	// Back from page 2 is page 1.
	back := get("/api/runs?limit=3&before=" + url.QueryEscape(pages[1].Prev))
	require.Equal(t, pages[0].Runs, back.Runs)

	// The HTML list pages the same way.
	doc := c.doc("/runs", http.StatusOK)
	require.Equal(t, 7, doc.Find(testid("run-row")).Length())
	require.Zero(t, doc.Find(testid("next-page")).Length())

	// key:value search: numbers match numbers, quoted values strings.
	require.Len(t, get("/api/runs?q="+url.QueryEscape("customer:c1")).Runs, 3)
	require.Len(t, get("/api/runs?q="+url.QueryEscape("n:4")).Runs, 1)
	require.Len(t, get("/api/runs?q="+url.QueryEscape(`customer:"c0" n:4`)).Runs, 1)
	require.Len(t, get("/api/runs?q="+url.QueryEscape("customer:c9")).Runs, 0)
	doc = c.doc("/runs?q="+url.QueryEscape("customer:c0"), http.StatusOK)
	require.Equal(t, 4, doc.Find(testid("run-row")).Length())
	require.Equal(t, "customer:c0", doc.Find(testid("filter-q")).AttrOr("value", ""))

	// Filters.
	require.Len(t, get("/api/runs?workflow=wf&status=pending").Runs, 7)
	require.Len(t, get("/api/runs?status=completed").Runs, 0)
	require.Len(t, get("/api/runs?from="+url.QueryEscape(time.Now().UTC().Add(time.Hour).Format("2006-01-02T15:04"))).Runs, 0)
	require.Len(t, get("/api/runs?to="+url.QueryEscape(time.Now().UTC().Add(time.Hour).Format(time.RFC3339))).Runs, 7)

	// Bad filters are 400s that say what is wrong.
	for _, q := range []string{"status=bogus", "q=justaword", "from=yesterday", "after=xyz", "limit=0", "limit=100000", "q=" + url.QueryEscape(`k:"open`)} {
		res, body := c.get("/api/runs?" + q)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, q)
		require.Contains(t, body, `"error"`)
		res, _ = c.get("/runs?" + q)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, q)
	}
}

func TestRunsPagingHTML(t *testing.T) {
	t.Parallel()
	e := setup(t, func(ec *engine.Config, _ *web.Config) { ec.NoWorker = true })
	ps := make([]engine.EnqueueParams, 60)
	for i := range ps {
		ps[i] = engine.EnqueueParams{Workflow: "wf", Input: map[string]int{"n": i}}
	}
	_, err := e.eng.EnqueueMany(context.Background(), ps)
	require.NoError(t, err)
	c := e.loggedIn(t, adminPW)

	doc := c.doc("/runs", http.StatusOK)
	require.Equal(t, 50, doc.Find(testid("run-row")).Length())
	next, ok := doc.Find(testid("next-page")).Attr("href")
	require.True(t, ok)
	first := map[string]bool{}
	doc.Find(testid("run-row")).Each(func(_ int, s *goquery.Selection) { first[s.AttrOr("data-run-id", "")] = true })
	doc = c.doc(next, http.StatusOK)
	require.Equal(t, 10, doc.Find(testid("run-row")).Length())
	doc.Find(testid("run-row")).Each(func(_ int, s *goquery.Selection) {
		require.False(t, first[s.AttrOr("data-run-id", "")], "no run on both pages")
	})
	require.Zero(t, doc.Find(testid("next-page")).Length())
	require.Equal(t, 1, doc.Find(testid("prev-page")).Length())
	require.Equal(t, 1, doc.Find(testid("first-page")).Length())
}

func TestRetryFailedTaskViaPost(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.failA.Store(true)
	runID := e.enqueue(t, nil)
	e.waitRun(t, runID, store.RunFailed)
	a := e.task(t, runID, "a")
	require.Equal(t, store.StatusFailed, a.Status)
	c := e.loggedIn(t, adminPW)

	doc := c.doc(fmt.Sprintf("/tasks/%d", a.ID), http.StatusOK)
	require.Contains(t, doc.Find(testid("attempt-error")).Text(), "a exploded")
	require.Contains(t, doc.Find(testid("task-last-error")).Text(), "a exploded", "a failed task shows its error")
	require.Zero(t, doc.Find(testid("attempt-error-past")).Length())
	require.Equal(t, 1, doc.Find(testid("task-retry")).Length())

	e.failA.Store(false)
	res, _ := c.postForm(fmt.Sprintf("/tasks/%d/retry", a.ID), nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, fmt.Sprintf("/tasks/%d", a.ID), res.Header.Get("Location"))
	e.waitRun(t, runID, store.RunCompleted)
	require.Equal(t, store.StatusCompleted, e.task(t, runID, "b").Status, "the skipped dependent ran")

	doc = c.doc(fmt.Sprintf("/tasks/%d", a.ID), http.StatusOK)
	require.Contains(t, doc.Find(testid("flash")).Text(), "sent back to ready")
	require.Equal(t, 2, doc.Find(testid("attempt")).Length())
	// Completed now: the first attempt's error is history, not the task's
	// current error.
	require.Zero(t, doc.Find(testid("task-last-error")).Length(), "no current error on a completed task")
	require.Zero(t, doc.Find(testid("attempt-error")).Length(), "no attempt error shown as current")
	first := doc.Find(testid("attempt")).First()
	require.Contains(t, first.Find(testid("attempt-error-past")).Text(), "a exploded")
	require.True(t, first.Find(testid("attempt-error-past")).HasClass("past"))
	require.Equal(t, "error of attempt 1 (retried)", strings.TrimSpace(first.Find(testid("attempt-error-label")).Text()))
	doc = c.doc(fmt.Sprintf("/runs/%d", runID), http.StatusOK)
	require.NotContains(t, doc.Find(testid("tasks-table")).Text(), "a exploded", "the run's task list shows no stale error")

	// Retrying a completed task is a conflict, not a 500.
	res, body := c.postForm(fmt.Sprintf("/tasks/%d/retry", a.ID), nil)
	require.Equal(t, http.StatusConflict, res.StatusCode)
	require.Contains(t, body, "invalid state")
	res, body = c.postJSON(fmt.Sprintf("/api/tasks/%d/retry", a.ID), "")
	require.Equal(t, http.StatusConflict, res.StatusCode, body)
}

func TestQueueActions(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	c := e.loggedIn(t, adminPW)

	res, _ := c.postForm("/queues/default/pause", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	q, err := e.st.QueueGet(ctx, "default")
	require.NoError(t, err)
	require.True(t, q.Paused)
	doc := c.doc("/queues", http.StatusOK)
	require.Contains(t, doc.Find(testid("queue-state")).Text(), "paused")
	require.Contains(t, doc.Find(testid("flash")).Text(), "Queue default paused.")
	require.Equal(t, 1, doc.Find(testid("queue-resume")).Length())

	// Paused: a new run waits.
	runID := e.enqueue(t, nil)
	res, _ = c.postForm("/queues/default/cap", url.Values{"max_running": {"2"}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	q, err = e.st.QueueGet(ctx, "default")
	require.NoError(t, err)
	require.Equal(t, 2, *q.MaxRunning)
	res, _ = c.postForm("/queues/default/cap", url.Values{"max_running": {"-1"}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	res, body := c.postJSON("/api/queues/default/cap", `{"max_running": null}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	q, err = e.st.QueueGet(ctx, "default")
	require.NoError(t, err)
	require.Nil(t, q.MaxRunning)
	run, err := e.st.RunGet(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, store.RunPending, run.Status, "nothing claimed from a paused queue")

	res, body = c.postJSON("/api/queues/default/resume", "")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	e.waitRun(t, runID, store.RunCompleted)

	res, body = c.postJSON("/api/queues/nosuch/pause", "")
	require.Equal(t, http.StatusNotFound, res.StatusCode, body)
	res, _ = c.postForm("/queues/nosuch/pause", nil)
	require.Equal(t, http.StatusNotFound, res.StatusCode)
}

func TestRunAndScheduleActions(t *testing.T) {
	t.Parallel()
	e := setup(t, func(ec *engine.Config, _ *web.Config) {
		ec.NoWorker = true
		ec.Schedules = []engine.Schedule{{Name: "hourly", Expression: "@hourly", Workflow: "wf"}}
	})
	ctx := context.Background()
	c := e.loggedIn(t, adminPW)
	runID := e.enqueue(t, nil)

	res, _ := c.postForm(fmt.Sprintf("/runs/%d/pause", runID), nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	e.waitRun(t, runID, store.RunPaused)
	res, _ = c.postForm(fmt.Sprintf("/runs/%d/resume", runID), nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	e.waitRun(t, runID, store.RunPending)
	res, _ = c.postForm(fmt.Sprintf("/runs/%d/cancel", runID), nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	e.waitRun(t, runID, store.RunCancelled)
	doc := c.doc(fmt.Sprintf("/runs/%d", runID), http.StatusOK)
	require.Zero(t, doc.Find(testid("run-cancel")).Length(), "a finished run offers no cancel")

	res, _ = c.postForm("/schedules/hourly/pause", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	sc, err := e.st.ScheduleGet(ctx, "hourly")
	require.NoError(t, err)
	require.True(t, sc.Paused)
	res, body := c.postJSON("/api/schedules/hourly/fire", "")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var fired struct {
		RunID int64 `json:"run_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &fired))
	_, err = e.st.RunGet(ctx, fired.RunID)
	require.NoError(t, err)
	res, _ = c.postForm("/schedules/hourly/resume", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	sc, err = e.st.ScheduleGet(ctx, "hourly")
	require.NoError(t, err)
	require.False(t, sc.Paused)
	res, _ = c.postForm("/schedules/nosuch/fire", nil)
	require.Equal(t, http.StatusNotFound, res.StatusCode)

	res, body = c.get("/api/schedules")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `"next_fires"`)
}

func TestBulkActionsConfirm(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	e.failA.Store(true)
	r1 := e.enqueue(t, map[string]string{"batch": "x"})
	r2 := e.enqueue(t, map[string]string{"batch": "x"})
	r3 := e.enqueue(t, map[string]string{"batch": "y"})
	for _, id := range []int64{r1, r2, r3} {
		e.waitRun(t, id, store.RunFailed)
	}
	c := e.loggedIn(t, adminPW)
	filter := url.Values{"action": {"retry"}, "q": {"batch:x"}}

	res, body := c.postForm("/runs/bulk", filter)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `data-testid="confirm"`)
	require.Contains(t, body, `data-testid="confirm-tasks">2<`)
	require.Equal(t, store.StatusFailed, e.task(t, r1, "a").Status, "nothing done before confirming")

	e.failA.Store(false)
	filter.Set("confirm", "yes")
	res, _ = c.postForm("/runs/bulk", filter)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.Equal(t, "/runs?q=batch%3Ax", res.Header.Get("Location"))
	e.waitRun(t, r1, store.RunCompleted)
	e.waitRun(t, r2, store.RunCompleted)
	require.Equal(t, store.StatusFailed, e.task(t, r3, "a").Status, "runs outside the filter are untouched")

	res, _ = c.postForm("/runs/bulk", url.Values{"action": {"explode"}, "confirm": {"yes"}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)

	res, body = c.postJSON("/api/runs/bulk", `{"action": "cancel", "filter": {"status": "failed"}, "dry_run": true}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `"runs": 0`, "failed runs are finished: nothing to cancel")
}

func TestBadIDsAndUnknownThings(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, adminPW)
	for _, tc := range []struct {
		path   string
		status int
	}{
		{"/runs/abc", http.StatusBadRequest},
		{"/runs/0", http.StatusBadRequest},
		{"/runs/-4", http.StatusBadRequest},
		{"/runs/99999999", http.StatusNotFound},
		{"/tasks/x1", http.StatusBadRequest},
		{"/tasks/99999999", http.StatusNotFound},
		{"/api/runs/abc", http.StatusBadRequest},
		{"/api/runs/99999999", http.StatusNotFound},
		{"/api/tasks/99999999", http.StatusNotFound},
		{"/fragments/runs/abc", http.StatusBadRequest},
		{"/nowhere", http.StatusNotFound},
		{"/api/nowhere", http.StatusNotFound},
	} {
		res, body := c.get(tc.path)
		require.Equal(t, tc.status, res.StatusCode, "%s: %s", tc.path, body)
	}
	doc := c.doc("/runs/99999999", http.StatusNotFound)
	require.Contains(t, doc.Find(testid("error-message")).Text(), "run 99999999 not found")

	res, _ := c.postForm("/tasks/abc/retry", nil)
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	res, _ = c.postForm("/tasks/99999999/retry", nil)
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	res, body := c.postJSON("/api/runs/99999999/cancel", "")
	require.Equal(t, http.StatusNotFound, res.StatusCode, body)

	// Enqueue through the API: typed errors become 4xx.
	res, body = c.postJSON("/api/runs", `{"workflow": "nosuch"}`)
	require.Equal(t, http.StatusUnprocessableEntity, res.StatusCode, body)
	res, body = c.postJSON("/api/runs", `{"workflow": "wf", "input": [1, 2]}`)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	res, body = c.postJSON("/api/runs", `{"workflow": "wf", "bogus": 1}`)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	res, body = c.postJSON("/api/runs", `{"workflow": "wf", "input": {"k": "v"}, "key": "once"}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, body)
	res, body = c.postJSON("/api/runs", `{"workflow": "wf", "input": {"k": "v"}, "key": "once"}`)
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, res.StatusCode, body)

	res, _ = c.postForm("/runs", url.Values{"workflow": {"wf"}, "input": {"not json"}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	res, _ = c.postForm("/runs", url.Values{"workflow": {"wf"}, "input": {`{"via": "form"}`}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	require.True(t, strings.HasPrefix(res.Header.Get("Location"), "/runs/"))
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	runID := e.enqueue(t, nil)
	e.waitRun(t, runID, store.RunCompleted)

	c := e.loggedIn(t, adminPW)
	res, body := c.get("/metrics")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `cairn_tasks{queue="default",state="completed"} 2`)
	require.Contains(t, body, `cairn_tasks{queue="default",state="failed"} 0`)
	require.Contains(t, body, "cairn_task_transitions_total")

	// Prometheus scrapes with Basic credentials.
	req, _ := http.NewRequest(http.MethodGet, e.ts.URL+"/metrics", nil)
	req.SetBasicAuth("prometheus", readonlyPW)
	res, _ = e.client(t).do(req)
	require.Equal(t, http.StatusOK, res.StatusCode)
}

func TestWebsocketStreamsEvents(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, adminPW)
	u, _ := url.Parse(e.ts.URL)
	wsURL := "ws://" + u.Host + "/ws"
	header := http.Header{"Origin": {e.ts.URL}}
	for _, ck := range c.hc.Jar.Cookies(u) {
		header.Add("Cookie", ck.Name+"="+ck.Value)
	}

	// Another origin is refused, and so is a socket without a session.
	_, res, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Origin": {"http://evil.example"}, "Cookie": header["Cookie"]})
	require.Error(t, err)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	_, res, err = websocket.DefaultDialer.Dial(wsURL, http.Header{"Origin": {e.ts.URL}})
	require.Error(t, err)
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)

	conn, _, err := websocket.DefaultDialer.Dial(wsURL, header)
	require.NoError(t, err)
	defer conn.Close()
	type msg struct {
		T      string         `json:"t"`
		Events []engine.Event `json:"events"`
	}
	read := func() msg {
		t.Helper()
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(15*time.Second)))
		var m msg
		require.NoError(t, conn.ReadJSON(&m))
		return m
	}
	require.Equal(t, "hello", read().T)

	runID := e.enqueue(t, nil)
	seen := map[string]bool{}
	for !seen["b:completed"] {
		m := read()
		if m.T == "logs" {
			continue // live log lines of some task: not what this test follows
		}
		require.Equal(t, "events", m.T)
		for _, ev := range m.Events {
			if ev.RunID == runID {
				name := "a"
				if ev.TaskID != e.task(t, runID, "a").ID {
					name = "b"
				}
				seen[name+":"+ev.To] = true
			}
		}
	}
	for _, want := range []string{"a:ready", "a:running", "a:completed", "b:ready", "b:running"} {
		require.True(t, seen[want], "event %s", want)
	}
}

func TestLoopbackWithoutPassword(t *testing.T) {
	t.Parallel()
	e := setup(t, func(_ *engine.Config, wc *web.Config) {
		wc.AdminPassword, wc.ReadonlyPassword = "", ""
	})
	c := e.client(t)
	doc := c.doc("/", http.StatusOK)
	require.Zero(t, doc.Find(testid("logout")).Length())
	c.csrf, _ = doc.Find(`meta[name="csrf-token"]`).Attr("content")
	require.NotEmpty(t, c.csrf, "an anonymous session carries a CSRF token")

	// A form still needs the token (a cross-site form could post here).
	res, _ := c.postForm("/queues/default/pause", url.Values{"csrf_token": {""}})
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	res, _ = c.postForm("/queues/default/pause", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)

	// A JSON API call without cookies (curl) needs none.
	req, _ := http.NewRequest(http.MethodPost, e.ts.URL+"/api/queues/default/resume", strings.NewReader(""))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	req, _ = http.NewRequest(http.MethodPost, e.ts.URL+"/api/queues/default/pause", strings.NewReader("x=1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusForbidden, res.StatusCode)

	res, _ = c.get("/login")
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
}

func TestLoginThrottled(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.client(t)
	for range 10 {
		res, _ := c.postForm("/login", url.Values{"password": {"guess"}})
		require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	}
	res, body := c.postForm("/login", url.Values{"password": {adminPW}})
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	require.Contains(t, body, `data-testid="login-error"`)
	retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After in seconds")
	require.InDelta(t, 300, retry, 30)

	// The API says so in JSON, like its other errors, with Retry-After.
	req, _ := http.NewRequest(http.MethodGet, e.ts.URL+"/api/runs", nil)
	req.SetBasicAuth("", adminPW)
	res, body = c.do(req)
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	require.Contains(t, res.Header.Get("Content-Type"), "application/json")
	require.NotEmpty(t, res.Header.Get("Retry-After"))
	var apiErr struct {
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &apiErr), body)
	require.Contains(t, apiErr.Error, "too many failed logins")

	// Elsewhere (Prometheus) plain text, also with Retry-After.
	req, _ = http.NewRequest(http.MethodGet, e.ts.URL+"/metrics", nil)
	req.SetBasicAuth("", adminPW)
	res, _ = c.do(req)
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	require.NotEmpty(t, res.Header.Get("Retry-After"))
}

func TestLoginRedirectStaysOnSite(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	evil := []string{"/%09/evil.example", "//evil.example", "/%5Cevil.example", "/%2F%2Fevil.example",
		"https://evil.example", "%20/evil.example", "/%0d%0aSet-Cookie:x=1", "/%09/evil.example%0a"}

	// Logged out: the login form carries only a clean next.
	anon := e.client(t)
	for _, next := range evil {
		doc := anon.doc("/login?next="+next, http.StatusOK)
		require.Equal(t, "/", doc.Find(`input[name="next"]`).AttrOr("value", ""), next)
	}
	doc := anon.doc("/login?next="+url.QueryEscape("/runs?status=failed"), http.StatusOK)
	require.Equal(t, "/runs?status=failed", doc.Find(`input[name="next"]`).AttrOr("value", ""))

	// Logging in, and visiting /login when logged in, redirect to / instead.
	c := e.loggedIn(t, adminPW)
	for _, next := range evil {
		res, _ := c.get("/login?next=" + next)
		require.Equal(t, http.StatusSeeOther, res.StatusCode, next)
		require.Equal(t, "/", res.Header.Get("Location"), next)
		dec, err := url.QueryUnescape(next)
		require.NoError(t, err)
		res, _ = e.client(t).postForm("/login", url.Values{"password": {adminPW}, "next": {dec}})
		require.Equal(t, http.StatusSeeOther, res.StatusCode, next)
		require.Equal(t, "/", res.Header.Get("Location"), next)
	}
	res, _ := c.get("/login?next=" + url.QueryEscape("/runs?status=failed"))
	require.Equal(t, "/runs?status=failed", res.Header.Get("Location"))
}

func TestRunActionsOnFinishedRunConflict(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	runID := e.enqueue(t, nil)
	e.waitRun(t, runID, store.RunCompleted)
	before, err := e.st.RunGet(ctx, runID)
	require.NoError(t, err)
	c := e.loggedIn(t, adminPW)

	for _, verb := range []string{"cancel", "pause", "resume"} {
		res, body := c.postJSON(fmt.Sprintf("/api/runs/%d/%s", runID, verb), "")
		require.Equal(t, http.StatusConflict, res.StatusCode, body)
		var out struct {
			Error string `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &out), body)
		require.Contains(t, out.Error, fmt.Sprintf("run %d is completed; only an unfinished run can be", runID))
		res, body = c.postForm(fmt.Sprintf("/runs/%d/%s", runID, verb), nil)
		require.Equal(t, http.StatusConflict, res.StatusCode, body)
	}
	after, err := e.st.RunGet(ctx, runID)
	require.NoError(t, err)
	require.Equal(t, before.UpdatedAt, after.UpdatedAt, "a refused action changes nothing")
	require.False(t, after.Paused)

	// Task actions say what state would have done.
	a := e.task(t, runID, "a")
	res, body := c.postJSON(fmt.Sprintf("/api/tasks/%d/retry", a.ID), "")
	require.Equal(t, http.StatusConflict, res.StatusCode, body)
	require.Contains(t, body, fmt.Sprintf("task %d is completed; only a failed or cancelled task can be retried", a.ID))
}

func TestWrongMethodIs405WithAllow(t *testing.T) {
	t.Parallel()
	e := setup(t, func(ec *engine.Config, _ *web.Config) { ec.NoWorker = true })
	runID := e.enqueue(t, nil)
	c := e.loggedIn(t, adminPW)
	req := func(method, path string, csrf bool) (*http.Response, string) {
		t.Helper()
		r, err := http.NewRequest(method, e.ts.URL+path, strings.NewReader(""))
		require.NoError(t, err)
		if csrf {
			r.Header.Set("X-CSRF-Token", c.csrf)
		}
		return c.do(r)
	}
	run := strconv.FormatInt(runID, 10)
	for _, tc := range []struct {
		method, path, allow string
	}{
		{http.MethodPost, "/runs/" + run, "GET, HEAD"},
		{http.MethodDelete, "/runs/" + run, "GET, HEAD"},
		{http.MethodGet, "/runs/" + run + "/cancel", "POST"},
		{http.MethodPut, "/runs", "GET, HEAD, POST"},
		{http.MethodPost, "/queues", "GET, HEAD"},
		{http.MethodPost, "/static/app.css", "GET, HEAD"},
		{http.MethodPost, "/metrics", "GET, HEAD"},
		{http.MethodGet, "/logout", "POST"},
		{http.MethodDelete, "/api/runs/" + run, "GET, HEAD"},
		{http.MethodGet, "/api/runs/" + run + "/cancel", "POST"},
		{http.MethodPatch, "/api/runs", "GET, HEAD, POST"},
		{http.MethodGet, "/api/queues/default/pause", "POST"},
		{http.MethodGet, "/api/runs/bulk", "POST"},
	} {
		// With or without a CSRF token: the method is wrong either way.
		for _, csrf := range []bool{false, true} {
			res, body := req(tc.method, tc.path, csrf)
			require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "%s %s: %s", tc.method, tc.path, body)
			require.Equal(t, tc.allow, res.Header.Get("Allow"), "%s %s", tc.method, tc.path)
			if strings.HasPrefix(tc.path, "/api/") {
				require.Contains(t, res.Header.Get("Content-Type"), "application/json")
				var out struct {
					Error string `json:"error"`
				}
				require.NoError(t, json.Unmarshal([]byte(body), &out), body)
				require.Contains(t, out.Error, tc.method+" is not allowed on "+tc.path)
			} else {
				doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
				require.NoError(t, err)
				require.Contains(t, doc.Find(testid("error-message")).Text(), "is not allowed")
			}
		}
	}
	r, err := e.st.RunGet(context.Background(), runID)
	require.NoError(t, err)
	require.Equal(t, store.RunPending, r.Status, "GET on a cancel route cancelled nothing")

	// Unknown paths are still 404, and real routes keep their CSRF guard.
	res, _ := req(http.MethodPost, "/nowhere", false)
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	res, body := req(http.MethodDelete, "/api/nowhere", false)
	require.Equal(t, http.StatusNotFound, res.StatusCode, body)
	res, _ = req(http.MethodPost, "/runs/"+run+"/cancel", false)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	ro := e.loggedIn(t, readonlyPW)
	res, _ = ro.postForm("/runs/"+run+"/cancel", nil)
	require.Equal(t, http.StatusForbidden, res.StatusCode)
	res, _ = ro.postForm("/runs/"+run, nil)
	require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode)
}

func TestAPIErrorsSpeakTheUsersTerms(t *testing.T) {
	t.Parallel()
	e := setup(t, func(ec *engine.Config, _ *web.Config) { ec.NoWorker = true })
	c := e.loggedIn(t, adminPW)
	for _, tc := range []struct {
		path, body, want string
	}{
		{"/api/runs", `[1, 2]`, "request body must be a JSON object"},
		{"/api/runs", `"wf"`, "request body must be a JSON object"},
		{"/api/runs", `{"workflow": "wf", "run_at": "tomorrow"}`, `run_at: expected a time like 2026-01-02T15:04:05Z (RFC 3339), got "tomorrow"`},
		{"/api/runs", `{"workflow": "wf", "run_at": 5}`, "run_at: expected a time like 2026-01-02T15:04:05Z"},
		{"/api/runs", `{"workflow": "wf", "priority": "high"}`, "priority: expected a whole number, got a string"},
		{"/api/runs", `{"workflow": "wf", "priority": 1.5}`, "priority: expected a whole number, got 1.5"},
		{"/api/runs", `{"workflow": ["wf"]}`, "workflow: expected a string, got an array"},
		{"/api/runs", `{"workflow": "wf", "bogus": 1}`, `unknown field "bogus"`},
		{"/api/runs", `{"workflow": "wf"`, "request body is not valid JSON: it ends too early"},
		{"/api/runs", `{"workflow" "wf"}`, "request body is not valid JSON: invalid character"},
		{"/api/runs", `{"workflow": "wf"} {}`, "request body: more than one JSON value"},
		{"/api/queues/default/cap", `{"max_running": "x"}`, "max_running: expected a whole number, got a string"},
		{"/api/queues/default/cap", `{"max_running": 2.5}`, "max_running: expected a whole number, got 2.5"},
		{"/api/queues/default/cap", `{"max_running": -1}`, "max_running: cap of queue \"default\" must not be negative"},
		{"/api/runs/bulk", `{"action": "cancel", "filter": []}`, "filter: expected a JSON object, got an array"},
		{"/api/runs/bulk", `{"action": "cancel", "filter": {"status": 3}}`, "filter.status: expected a string, got a number"},
		{"/api/runs/bulk", `{"action": "cancel", "dry_run": "yes"}`, "dry_run: expected true or false, got a string"},
	} {
		res, body := c.postJSON(tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s %s: %s", tc.path, tc.body, body)
		var out struct {
			Error string `json:"error"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &out), body)
		require.Contains(t, out.Error, tc.want, tc.body)
		for _, leak := range []string{"Go ", "web.", "struct", "unmarshal", "2006-01-02T15:04:05Z07:00", "json:"} {
			require.NotContains(t, out.Error, leak, "%s: no Go internals", tc.body)
		}
	}
	runs, err := e.st.RunListFiltered(context.Background(), &store.RunListParams{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, runs, "no refused request enqueued anything")
	q, err := e.st.QueueGet(context.Background(), "default")
	require.NoError(t, err)
	require.Nil(t, q.MaxRunning, "no refused request set a cap")

	// A good time is accepted.
	res, body := c.postJSON("/api/runs", `{"workflow": "wf", "run_at": "2030-01-02T15:04:05Z"}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, body)
	res, body = c.postJSON("/api/runs", `{"workflow": "wf", "run_at": null}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, body)

	// Forms and query strings say it the same way.
	res, body = c.postForm("/queues/default/cap", url.Values{"max_running": {"abc"}})
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Contains(t, body, "max_running &#34;abc&#34;: must be a whole number")
	res, body = c.get("/api/runs?q=" + url.QueryEscape(`k:"\x"`))
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Contains(t, body, "bad quoted value: use JSON string escapes")
	require.NotContains(t, body, "invalid character")
}

func TestRunsPagingLinksKeepLimitAndFilters(t *testing.T) {
	t.Parallel()
	e := setup(t, func(ec *engine.Config, _ *web.Config) { ec.NoWorker = true })
	ps := make([]engine.EnqueueParams, 8)
	for i := range ps {
		ps[i] = engine.EnqueueParams{Workflow: "wf", Input: map[string]any{"n": i, "batch": "x"}}
	}
	_, err := e.eng.EnqueueMany(context.Background(), ps)
	require.NoError(t, err)
	c := e.loggedIn(t, adminPW)

	filter := url.Values{"workflow": {"wf"}, "status": {"pending"}, "from": {"2000-01-01"},
		"to": {time.Now().UTC().Add(time.Hour).Format(time.RFC3339)}, "q": {"batch:x"}, "limit": {"3"}}
	href := func(doc *goquery.Document, id string) url.Values {
		t.Helper()
		h, ok := doc.Find(testid(id)).Attr("href")
		require.True(t, ok, id)
		u, err := url.Parse(h)
		require.NoError(t, err)
		return u.Query()
	}
	keeps := func(v url.Values, id string) {
		t.Helper()
		for k := range filter {
			require.Equal(t, filter.Get(k), v.Get(k), "%s link keeps %s", id, k)
		}
	}
	seen := map[string]bool{}
	doc := c.doc("/runs?"+filter.Encode(), http.StatusOK)
	for page := 1; ; page++ {
		rows := doc.Find(testid("run-row"))
		require.LessOrEqual(t, rows.Length(), 3, "page %d keeps the limit", page)
		rows.Each(func(_ int, s *goquery.Selection) {
			id := s.AttrOr("data-run-id", "")
			require.False(t, seen[id], "run %s twice", id)
			seen[id] = true
		})
		if page > 1 {
			keeps(href(doc, "prev-page"), "prev-page")
			keeps(href(doc, "first-page"), "first-page")
		}
		if doc.Find(testid("next-page")).Length() == 0 {
			require.Equal(t, 3, page)
			break
		}
		next := href(doc, "next-page")
		keeps(next, "next-page")
		doc = c.doc("/runs?"+next.Encode(), http.StatusOK)
	}
	require.Len(t, seen, 8)
}

func TestBadRunsFilterShowsTheFormWithTheError(t *testing.T) {
	t.Parallel()
	e := setup(t, func(ec *engine.Config, _ *web.Config) { ec.NoWorker = true })
	e.enqueue(t, nil)
	c := e.loggedIn(t, adminPW)
	for _, tc := range []struct {
		query, field, want string
	}{
		{"status=bogus", "status", `status "bogus": must be one of`},
		{"from=yesterday&q=customer:acme", "from", `from "yesterday": use a time like`},
		{"to=later", "to", `to "later": use a time like`},
		{"q=justaword&status=failed", "q", `search term "justaword": write key:value`},
		{"q=" + url.QueryEscape(`k:"open`), "q", "unclosed quote"},
		{"workflow=" + strings.Repeat("w", 201), "workflow", "longer than 200 characters"},
		{"limit=0", "limit", `limit "0": must be 1 to`},
		{"after=xyz", "after", "bad cursor"},
	} {
		doc := c.doc("/runs?"+tc.query, http.StatusBadRequest)
		require.Equal(t, 1, doc.Find(testid("runs-filter")).Length(), "%s: the runs page with its form", tc.query)
		require.Equal(t, "Runs", strings.TrimSpace(doc.Find("h1").First().Text()), tc.query)
		errEl := doc.Find(testid("filter-error"))
		require.Equal(t, 1, errEl.Length(), tc.query)
		require.Equal(t, tc.field, errEl.AttrOr("data-field", ""), tc.query)
		require.Contains(t, errEl.Text(), tc.want, tc.query)
		if onForm := doc.Find(testid("filter-" + tc.field)); onForm.Length() > 0 {
			require.Equal(t, "true", onForm.AttrOr("aria-invalid", ""), "%s: the field is marked", tc.query)
			require.Equal(t, 1, errEl.ParentsFiltered("label").Find(testid("filter-"+tc.field)).Length(), "%s: the error sits beside its field", tc.query)
		}
		require.Zero(t, doc.Find(testid("run-row")).Length(), tc.query)
		require.Zero(t, doc.Find(testid("runs-live")).Length(), "%s: no live refresh of a bad filter", tc.query)
	}
	// The form keeps what was sent.
	doc := c.doc("/runs?from=yesterday&q=customer:acme", http.StatusBadRequest)
	require.Equal(t, "yesterday", doc.Find(testid("filter-from")).AttrOr("value", ""))
	require.Equal(t, "customer:acme", doc.Find(testid("filter-q")).AttrOr("value", ""))
	// A good filter shows no error.
	doc = c.doc("/runs?status=pending", http.StatusOK)
	require.Zero(t, doc.Find(testid("filter-error")).Length())
	require.Equal(t, 1, doc.Find(testid("run-row")).Length())
}
