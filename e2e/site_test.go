package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/e2e/browser"
	"github.com/cairnhq/cairn/store/pgtest"
)

// Passwords every site test server runs with.
const (
	siteAdminPassword    = "e2e-admin-secret"
	siteReadonlyPassword = "e2e-readonly-secret"
)

// Per-step limits. The machine may be a busy 2-core box running several
// servers and browsers at once, so they are generous; a passing step
// takes a fraction of them.
const (
	siteStep     = 15 * time.Second // one navigation, click or query
	siteTaskWait = 30 * time.Second // a demo task reaching a state
	siteRunWait  = 75 * time.Second // a whole etl run (its file wait is ~20 s)
	sitePollTick = 100 * time.Millisecond
)

// TestSite drives the admin site of the real server (cmd/server --demo)
// with a real Chromium against a real PostgreSQL: login, live updates on
// an open page, actions through the forms, CSRF and read-only refusals,
// and a screenshot of every page. Each case has its own database, server
// and browser, and they run in parallel.
func TestSite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Login", testSiteLogin},
		{"LiveRunPage", testSiteLiveRunPage},
		{"LiveResyncOnConnect", testSiteLiveResyncOnConnect},
		{"RetryFailedTask", testSiteRetryFailedTask},
		{"PauseResumeQueue", testSitePauseResumeQueue},
		{"CSRF", testSiteCSRF},
		{"Readonly", testSiteReadonly},
		{"ScheduleForm", testSiteScheduleForm},
		{"Screenshots", testSiteScreenshots},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

// testSiteLogin: an unauthenticated visit redirects to /login (keeping the
// page asked for in next), a wrong password is refused with 401 and a
// message, the right one lands on the overview as admin, and the page goes
// live (websocket connected).
func testSiteLogin(t *testing.T) {
	s := newSite(t)

	resp := s.navigate("/")
	require.Equal(t, http.StatusOK, int(resp.Status), "login page status")
	loc := s.location()
	require.Equal(t, "/login", loc.Path, "unauthenticated / must redirect to the login page")
	require.Equal(t, "/", loc.Query().Get("next"))
	s.waitVisible(`[data-testid=login-form]`)

	// A wrong password: 401 and an error on the login page.
	s.fill(`[data-testid=password]`, "not-the-password")
	resp = s.clickNavigate(`[data-testid=login-submit]`)
	require.Equal(t, http.StatusUnauthorized, int(resp.Status), "wrong password status")
	require.Equal(t, "Wrong password.", s.text(`[data-testid=login-error]`))
	require.Equal(t, "/login", s.location().Path)

	// The right one: back to the page asked for, the overview.
	s.fill(`[data-testid=password]`, siteAdminPassword)
	resp = s.clickNavigate(`[data-testid=login-submit]`)
	require.Equal(t, http.StatusOK, int(resp.Status), "overview status")
	require.Equal(t, "/", s.location().Path, "after login the browser lands on the overview")
	require.Equal(t, "Overview", s.text(`main h1`))
	require.Equal(t, "admin", s.text(`[data-testid=role]`))
	s.waitVisible(`[data-testid=state-counts]`)
	s.waitVisible(`[data-testid=count-total]`)
	s.waitLive()

	// Logging out ends the session: pages lead to the login page again.
	resp = s.clickNavigate(`[data-testid=logout]`)
	require.Equal(t, http.StatusOK, int(resp.Status))
	require.Equal(t, "/login", s.location().Path)
	s.navigate("/runs")
	loc = s.location()
	require.Equal(t, "/login", loc.Path, "after logout pages need a login again")
	require.Equal(t, "/runs", loc.Query().Get("next"))

	// A page asked for before login is where the login leads.
	s2 := &site{t: t, url: s.url, ctx: browser.NewContext(t)}
	s2.navigate("/queues")
	loc = s2.location()
	require.Equal(t, "/login", loc.Path)
	require.Equal(t, "/queues", loc.Query().Get("next"))
	s2.fill(`[data-testid=password]`, siteAdminPassword)
	resp = s2.clickNavigate(`[data-testid=login-submit]`)
	require.Equal(t, http.StatusOK, int(resp.Status))
	require.Equal(t, "/queues", s2.location().Path)
	s2.waitVisible(`[data-testid=queues-table]`)
}

// testSiteLiveRunPage: a run started through the enqueue form on /runs
// opens on its run page, and that page, never reloaded, shows its tasks
// move through their states to completed (the DAG nodes' data-status), and
// the run itself completed.
func testSiteLiveRunPage(t *testing.T) {
	s := newSite(t)
	s.login(siteAdminPassword)

	runID := s.enqueueForm("etl", `{"source":"e2e-live"}`)
	s.waitVisible(`[data-testid=dag]`)
	s.waitLive()
	// Mark this document (a reload or navigation would lose the marker)
	// and log every data-status a DAG node takes, in order: the 100 ms
	// polling below can miss a state that lasts a few milliseconds (a task
	// whose file already exists), the observer cannot.
	s.eval(siteStatusObserver)
	startURL := s.location().String()

	// Poll what the open page shows every 100 ms until all five tasks are
	// completed.
	polled := map[string][]string{}
	start := time.Now()
	s.poll("all five etl tasks completed on the open run page", siteRunWait, func() bool {
		states := evalAs[map[string]string](s, siteNodeStates)
		done := len(states) == 5
		for name, st := range states {
			if h := polled[name]; len(h) == 0 || h[len(h)-1] != st {
				polled[name] = append(h, st)
				t.Logf("run page at %5.1fs: %-13s %s", time.Since(start).Seconds(), name, st)
			}
			done = done && st == "completed"
		}
		return done
	}, func() string { return fmt.Sprint(polled) })
	observed := evalAs[map[string][]string](s, `window.__cairnStatusLog`)
	t.Logf("every state the page showed: %v", observed)

	active := func(st string) bool { return st == "ready" || st == "running" || st == "deferred" }
	for _, name := range []string{"extract", "transform", "enrich", "wait_for_file", "load"} {
		h := observed[name]
		require.NotEmpty(t, h, "task %s never shown", name)
		require.Equal(t, "completed", h[len(h)-1], "task %s", name)
		require.True(t, slices.ContainsFunc(h, active), "task %s: the page never showed it ready, running or deferred before completed: %v", name, h)
	}
	// The tasks after the first were first shown waiting on their
	// dependencies, so all their changes happened on the open page.
	for _, name := range []string{"transform", "enrich", "wait_for_file", "load"} {
		require.Equal(t, "not_started", observed[name][0], "task %s: first shown as %v", name, observed[name])
	}
	// The tasks that run a second or more were also seen by the polling
	// itself, active and then completed.
	for _, name := range []string{"extract", "transform", "enrich", "load"} {
		h := polled[name]
		i := slices.IndexFunc(h, active)
		require.True(t, i >= 0 && h[len(h)-1] == "completed", "task %s: polled %v, want ready or running, then completed", name, h)
	}
	s.pollText(`[data-testid=run-status] .badge`, "completed", siteStep)

	require.Equal(t, 1, evalAs[int](s, `window.__cairnMarker || 0`), "the run page was reloaded or left")
	require.Equal(t, startURL, s.location().String())
	require.Equal(t, "on", s.attr(`[data-testid=live-status]`, "data-live"))
	t.Logf("run #%d completed on the live page after %s", runID, time.Since(start).Round(100*time.Millisecond))
}

// testSiteLiveResyncOnConnect: a run page whose websocket connects only
// after the run changed (here: cancelled between the page's render and
// its socket's handshake) must catch up once it is live, not show the
// state it was rendered with until the next event of that run or the
// 15 s periodic refresh. The delay is made by holding back the page's
// first WebSocket (a script installed before the page's own), which is
// what a slow handshake, or a task claimed while the page loads, does.
func testSiteLiveResyncOnConnect(t *testing.T) {
	s := newSite(t)
	s.login(siteAdminPassword)
	api := s.basicClient(siteAdminPassword)

	status, body := api("POST", "/api/runs", `{"workflow":"etl","input":{"source":"e2e-resync"}}`)
	require.Equal(t, http.StatusCreated, status, body)
	var created struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &created))

	ctx, cancel := context.WithTimeout(s.ctx, siteStep)
	_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `(() => {
		const Real = window.WebSocket;
		window.__cairnWSGate = false;
		window.WebSocket = function (url, protocols) {
			if (window.__cairnWSGate) return new Real(url, protocols);
			const held = {close() {}};
			setTimeout(() => held.onclose && held.onclose({}), 0);
			return held;
		};
	})()`})
	cancel()
	require.NoError(t, err)

	resp := s.navigate("/runs/" + strconv.FormatInt(created.ID, 10))
	require.Equal(t, http.StatusOK, int(resp.Status))
	s.waitVisible(`[data-testid=dag]`)
	rendered := evalAs[map[string]string](s, siteNodeStates)
	require.Len(t, rendered, 5)
	require.NotEqual(t, "cancelled", rendered["load"], "the run was not cancelled yet")
	require.Equal(t, "off", s.attr(`[data-testid=live-status]`, "data-live"), "the first socket is held back")

	status, body = api("POST", "/api/runs/"+strconv.FormatInt(created.ID, 10)+"/cancel", `{}`)
	require.Equal(t, http.StatusOK, status, body)
	want := s.apiTaskStates(api, created.ID)
	require.Equal(t, "cancelled", want["load"], "API after cancel: %v", want)

	s.eval(`window.__cairnMarker = 1; window.__cairnWSGate = true`)
	s.waitLive()
	liveAt := time.Now()
	var shown map[string]string
	caughtUp := func() bool {
		shown = evalAs[map[string]string](s, siteNodeStates)
		return fmt.Sprint(shown) == fmt.Sprint(want)
	}
	deadline := liveAt.Add(5 * time.Second) // well before the 15 s periodic refresh
	tick := time.NewTicker(sitePollTick)
	defer tick.Stop()
	for !caughtUp() && time.Now().Before(deadline) {
		<-tick.C
	}
	require.Equal(t, 1, evalAs[int](s, `window.__cairnMarker || 0`), "the page was reloaded")
	if fmt.Sprint(shown) != fmt.Sprint(want) {
		t.Fatalf("run page still shows %v %s after going live, while the run is %v (the page must re-fetch on its first websocket hello)",
			shown, time.Since(liveAt).Round(100*time.Millisecond), want)
	}
	s.pollText(`[data-testid=run-status] .badge`, "cancelled", siteStep)
}

// testSiteRetryFailedTask: the "unstable" workflow's check fails for good
// on attempt 1; its task page shows it failed (live) with the error and a
// Retry button; the button (a form with the CSRF token) sends it back and
// the page shows attempt 2 completed; then the run completes.
func testSiteRetryFailedTask(t *testing.T) {
	s := newSite(t)
	s.login(siteAdminPassword)

	runID := s.enqueueForm("unstable", `{"file":"e2e.csv"}`)
	checkID := evalAs[string](s, `[...document.querySelectorAll('[data-testid=dag-node]')]
		.find(g => g.querySelector('text.name').textContent.trim() === 'check').getAttribute('data-task-id')`)
	require.NotEmpty(t, checkID)

	resp := s.navigate("/tasks/" + checkID)
	require.Equal(t, http.StatusOK, int(resp.Status))
	s.waitLive()
	start := time.Now()
	s.pollAttr(`[data-testid=task-status] [data-status]`, "data-status", "failed", siteTaskWait)
	t.Logf("task page showed check failed after %s", time.Since(start).Round(100*time.Millisecond))
	s.waitVisible(`[data-testid=task-retry]`) // the live part is re-fetched after the failure
	require.Contains(t, s.text(`[data-testid=task-last-error]`), "checksum mismatch")
	require.Equal(t, 1, s.count(`[data-testid=attempt]`))
	require.Equal(t, "failed", s.text(`[data-testid=attempt-outcome]`))
	require.True(t, strings.HasPrefix(s.attemptLabel(), "1 of"), "attempt %q", s.attemptLabel())

	resp = s.clickNavigate(`[data-testid=task-retry]`)
	require.Equal(t, http.StatusOK, int(resp.Status))
	require.Equal(t, "/tasks/"+checkID, s.location().Path, "retry returns to the task page")
	require.Contains(t, s.text(`[data-testid=flash]`), "sent back to ready")
	s.waitLive()
	start = time.Now()
	s.pollAttr(`[data-testid=task-status] [data-status]`, "data-status", "completed", siteTaskWait)
	t.Logf("task page showed check completed %s after it went live", time.Since(start).Round(100*time.Millisecond))
	// The status badge follows the event at once; the attempts section is
	// re-fetched, and may first show attempt 2 still in progress (no
	// outcome badge): wait for both outcomes.
	s.poll("attempt 2 finished on the task page", siteStep, func() bool {
		return s.count(`[data-testid=attempt-outcome]`) == 2 && strings.HasPrefix(s.attemptLabel(), "2 of")
	}, func() string { return s.attemptLabel() })
	outcomes := evalAs[[]string](s, `[...document.querySelectorAll('[data-testid=attempt-outcome]')].map(e => e.textContent.trim())`)
	require.Len(t, outcomes, 2)
	require.Contains(t, outcomes, "failed", "attempt 1 stays in the history")
	require.Contains(t, s.text(`[data-testid=task-output]`), `"ok"`)

	resp = s.clickNavigate(`[data-testid=task-run-link]`)
	require.Equal(t, http.StatusOK, int(resp.Status))
	require.Equal(t, "/runs/"+strconv.FormatInt(runID, 10), s.location().Path)
	s.pollText(`[data-testid=run-status] .badge`, "completed", siteTaskWait)
	statuses := evalAs[[]string](s, `[...document.querySelectorAll('[data-testid=dag-node]')].map(g => g.getAttribute('data-status'))`)
	require.Equal(t, []string{"completed", "completed"}, statuses)
}

// testSitePauseResumeQueue: the Pause button on /queues pauses the
// default queue (shown paused, and so in the API), Resume resumes it.
func testSitePauseResumeQueue(t *testing.T) {
	s := newSite(t)
	s.login(siteAdminPassword)

	resp := s.navigate("/queues")
	require.Equal(t, http.StatusOK, int(resp.Status))
	row := `[data-testid=queue-row][data-queue=default]`
	s.waitVisible(row)
	require.Equal(t, "active", s.text(row+` [data-testid=queue-state]`))
	require.False(t, s.apiQueuePaused("default"))

	resp = s.clickNavigate(row + ` [data-testid=queue-pause]`)
	require.Equal(t, http.StatusOK, int(resp.Status))
	require.Equal(t, "/queues", s.location().Path)
	require.Equal(t, "Queue default paused.", s.text(`[data-testid=flash]`))
	require.Equal(t, "paused", s.text(row+` [data-testid=queue-state]`))
	require.Equal(t, 0, s.count(row+` [data-testid=queue-pause]`))
	require.True(t, s.apiQueuePaused("default"), "the API must show the queue paused")

	resp = s.clickNavigate(row + ` [data-testid=queue-resume]`)
	require.Equal(t, http.StatusOK, int(resp.Status))
	require.Equal(t, "Queue default resumed.", s.text(`[data-testid=flash]`))
	require.Equal(t, "active", s.text(row+` [data-testid=queue-state]`))
	s.waitVisible(row + ` [data-testid=queue-pause]`)
	require.False(t, s.apiQueuePaused("default"), "the API must show the queue active again")
}

// testSiteCSRF: a state-changing POST with the session cookie but without
// the CSRF token is refused with 403, from the logged-in browser (form and
// JSON API, missing or wrong token) and from a Go client holding the
// browser's session cookie; the queue stays active. With the token the
// same Go request succeeds, so the token is the only thing missing.
func testSiteCSRF(t *testing.T) {
	s := newSite(t)
	s.login(siteAdminPassword)
	s.navigate("/queues")
	s.waitVisible(`[data-testid=queue-row][data-queue=default]`)

	type fetchResult struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	}
	for _, tc := range []struct{ name, js string }{
		{"form without token", `fetch('/queues/default/pause', {method: 'POST', credentials: 'same-origin',
			headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: ''})`},
		{"form with a wrong token", `fetch('/queues/default/pause', {method: 'POST', credentials: 'same-origin',
			headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'csrf_token=forged'})`},
		{"API without token", `fetch('/api/queues/default/pause', {method: 'POST', credentials: 'same-origin',
			headers: {'Content-Type': 'application/json'}, body: '{}'})`},
		{"API with a wrong header token", `fetch('/api/queues/default/pause', {method: 'POST', credentials: 'same-origin',
			headers: {'Content-Type': 'application/json', 'X-CSRF-Token': 'forged'}, body: '{}'})`},
	} {
		res := evalAs[fetchResult](s, tc.js+`.then(async r => ({status: r.status, body: await r.text()}))`, chromedp.EvalAwaitPromise)
		require.Equal(t, http.StatusForbidden, res.Status, "%s: %s", tc.name, res.Body)
		require.Contains(t, res.Body, "CSRF token", tc.name)
	}

	// A Go client with the browser's session cookie.
	cookie := s.sessionCookie()
	client := &http.Client{
		Timeout:       siteStep,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	post := func(path string, form url.Values) (int, string) {
		req, err := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(cookie)
		res, err := client.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		return res.StatusCode, string(body)
	}
	status, body := post("/queues/default/pause", nil)
	require.Equal(t, http.StatusForbidden, status, body)
	require.Contains(t, body, "CSRF token")
	status, body = post("/tasks/1/retry", nil)
	require.Equal(t, http.StatusForbidden, status, body)

	require.False(t, s.apiQueuePaused("default"), "a refused POST must not pause the queue")
	s.navigate("/queues")
	require.Equal(t, "active", s.text(`[data-testid=queue-row][data-queue=default] [data-testid=queue-state]`))

	// The control: the same request with the page's token is accepted.
	token := s.attr(`meta[name=csrf-token]`, "content")
	require.NotEmpty(t, token)
	require.Equal(t, token, s.attr(`[data-testid=queue-row][data-queue=default] input[name=csrf_token]`, "value"), "forms carry the page's token")
	status, body = post("/queues/default/pause", url.Values{"csrf_token": {token}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.True(t, s.apiQueuePaused("default"))
	status, body = post("/queues/default/resume", url.Values{"csrf_token": {token}})
	require.Equal(t, http.StatusSeeOther, status, body)
	require.False(t, s.apiQueuePaused("default"))
}

// testSiteReadonly: the read-only login sees every page but no action
// controls, and its action POSTs are refused with 403 even with a valid
// CSRF token.
func testSiteReadonly(t *testing.T) {
	s := newSite(t)
	s.login(siteReadonlyPassword)
	require.Equal(t, "readonly", s.text(`[data-testid=role]`))

	for _, p := range []string{"/", "/runs", "/runs/1", "/workflows", "/workers", "/queues", "/schedules"} {
		resp := s.navigate(p)
		require.Equal(t, http.StatusOK, int(resp.Status), "GET %s", p)
		require.Equal(t, p, s.location().Path, "GET %s", p)
	}
	s.navigate("/runs/1")
	taskHref := s.attr(`[data-testid=tasks-table] a`, "href")
	resp := s.navigate(taskHref)
	require.Equal(t, http.StatusOK, int(resp.Status))
	s.waitVisible(`[data-testid=task-status]`)
	require.Equal(t, 0, s.count(`[data-testid=task-actions]`), "no task actions for read-only")
	s.navigate("/runs")
	require.Equal(t, 0, s.count(`[data-testid=enqueue-form]`), "no enqueue form for read-only")
	s.navigate("/queues")
	s.waitVisible(`[data-testid=queue-row][data-queue=default]`)
	require.Equal(t, 0, s.count(`[data-testid=queue-pause]`), "no pause button for read-only")
	s.navigate("/schedules")
	s.waitVisible(`[data-testid=schedule-row]`)
	require.Equal(t, 0, s.count(`[data-testid=schedule-fire]`), "no fire button for read-only")
	require.Equal(t, 0, s.count(`[data-testid=schedule-new]`)+s.count(`[data-testid=schedule-edit]`), "no schedule form for read-only")

	token := s.attr(`meta[name=csrf-token]`, "content")
	require.NotEmpty(t, token, "read-only sessions still carry a CSRF token")
	type fetchResult struct {
		Status int    `json:"status"`
		Body   string `json:"body"`
	}
	for _, tc := range []struct{ name, js string }{
		{"pause queue form", `fetch('/queues/default/pause', {method: 'POST', credentials: 'same-origin',
			headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'csrf_token=' + encodeURIComponent(TOKEN)})`},
		{"enqueue form", `fetch('/runs', {method: 'POST', credentials: 'same-origin',
			headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: 'workflow=etl&input=%7B%7D&csrf_token=' + encodeURIComponent(TOKEN)})`},
		{"retry API", `fetch('/api/tasks/1/retry', {method: 'POST', credentials: 'same-origin',
			headers: {'Content-Type': 'application/json', 'X-CSRF-Token': TOKEN}, body: '{}'})`},
		{"fire schedule API", `fetch('/api/schedules/etl-every-minute/fire', {method: 'POST', credentials: 'same-origin',
			headers: {'Content-Type': 'application/json', 'X-CSRF-Token': TOKEN}, body: '{}'})`},
	} {
		js := strings.ReplaceAll(tc.js, "TOKEN", strconv.Quote(token))
		res := evalAs[fetchResult](s, js+`.then(async r => ({status: r.status, body: await r.text()}))`, chromedp.EvalAwaitPromise)
		require.Equal(t, http.StatusForbidden, res.Status, "%s: %s", tc.name, res.Body)
		require.Contains(t, res.Body, "read-only", tc.name)
	}
	require.False(t, s.apiQueuePaused("default"))

	// HTTP Basic with the read-only password: reads yes, writes no.
	client := &http.Client{Timeout: siteStep}
	do := func(method, path string) int {
		req, err := http.NewRequest(method, s.url+path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.SetBasicAuth("", siteReadonlyPassword)
		res, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		require.NoError(t, res.Body.Close())
		return res.StatusCode
	}
	require.Equal(t, http.StatusOK, do(http.MethodGet, "/api/queues"))
	require.Equal(t, http.StatusForbidden, do(http.MethodPost, "/api/queues/default/pause"))
	require.False(t, s.apiQueuePaused("default"))
}

// testSiteScreenshots saves a full-page PNG of every page, at 1400×1000
// and at a phone's 390×844, and checks each is a real, non-empty image.
// The PNGs go to $CAIRN_SCREENSHOTS when set (kept for a reader to look
// at), else to the test's temporary directory; the path is logged. At the
// phone width no element of a page's main content may reach past the
// window's edges: tables fold into cards, text wraps, and only a diagram
// may scroll sideways within its box.
func testSiteScreenshots(t *testing.T) {
	s := newSite(t)
	dir := os.Getenv("CAIRN_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	t.Logf("screenshots in %s", dir)

	type size struct {
		suffix string
		w, h   int64
	}
	desktop, phone := size{"", 1400, 1000}, size{"-phone", 390, 844}
	setSize := func(sz size) {
		t.Helper()
		s.step("viewport "+strconv.FormatInt(sz.w, 10), siteStep, chromedp.EmulateViewport(sz.w, sz.h))
	}
	shot := func(name string, sz size) {
		t.Helper()
		name += sz.suffix
		if sz == phone {
			type overflow struct {
				ScrollWidth float64  `json:"sw"`
				InnerWidth  float64  `json:"iw"`
				Offenders   []string `json:"off"`
			}
			o := evalAs[overflow](s, siteOverflow)
			// Errorf, not Fatal: every page still gets its screenshot.
			if o.ScrollWidth > o.InnerWidth || len(o.Offenders) > 0 {
				t.Errorf("page %s at %dpx: document %v wide in a %v window; elements past the window's edges: %v",
					name, sz.w, o.ScrollWidth, o.InnerWidth, o.Offenders)
			}
		}
		ctx, cancel := context.WithTimeout(s.ctx, siteStep)
		defer cancel()
		buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err, "screenshot %s", name)
		require.NotEmpty(t, buf, "screenshot %s", name)
		cfg, err := png.DecodeConfig(bytes.NewReader(buf))
		require.NoError(t, err, "screenshot %s is not a PNG", name)
		require.Greater(t, cfg.Width, 100, "screenshot %s", name)
		require.Greater(t, cfg.Height, 100, "screenshot %s", name)
		path := filepath.Join(dir, name+".png")
		require.NoError(t, os.WriteFile(path, buf, 0o644))
		fi, err := os.Stat(path)
		require.NoError(t, err)
		require.Positive(t, fi.Size())
		t.Logf("screenshot %-21s %4dx%-5d %7d bytes  %s", name, cfg.Width, cfg.Height, fi.Size(), path)
	}

	for _, sz := range []size{phone, desktop} {
		setSize(sz)
		s.navigate("/")
		s.waitVisible(`[data-testid=login-form]`)
		shot("login", sz)
	}
	s.login(siteAdminPassword)

	// Let the demo show some history: a completed task in run 1 (etl).
	s.navigate("/runs/1")
	s.waitLive()
	s.poll("a completed task on run 1", siteTaskWait, func() bool {
		return s.count(`[data-testid=dag-node][data-status=completed]`) > 0
	}, nil)
	firstTask := s.attr(`[data-testid=dag-node]`, "data-task-id")
	require.NotEmpty(t, firstTask)
	// And a failed task, with its error: the demo's "unstable" run.
	s.navigate("/runs?workflow=unstable")
	s.waitVisible(`[data-testid=run-row]`)
	unstable := s.attr(`[data-testid=run-row]`, "data-run-id")
	require.NotEmpty(t, unstable)
	s.navigate("/runs/" + unstable)
	s.waitLive()
	s.poll("a failed task on the unstable run", siteTaskWait, func() bool {
		return s.count(`[data-testid=dag-node][data-status=failed]`) > 0
	}, nil)
	failedTask := s.attr(`[data-testid=dag-node][data-status=failed]`, "data-task-id")

	pages := []struct{ name, path, wait string }{
		{"run", "/runs/1", `[data-testid=dag-node]`},
		{"task", "/tasks/" + firstTask, `[data-testid=attempt]`},
		{"task-failed", "/tasks/" + failedTask, `[data-testid=attempt]`},
		{"overview", "/", `[data-testid=throughput-chart]`},
		{"runs", "/runs", `[data-testid=run-row]`},
		{"workflows", "/workflows", `[data-testid=workflow]`},
		{"workers", "/workers", `[data-testid=worker-row]`},
		{"queues", "/queues", `[data-testid=queue-row]`},
		{"schedules", "/schedules", `[data-testid=schedule-row]`},
		{"schedule-new", "/schedules/new", `form`},
		{"schedule-edit", "/schedules/etl-every-minute/edit", `[data-testid=preview-fire]`},
	}
	for _, sz := range []size{desktop, phone} {
		setSize(sz)
		for _, p := range pages {
			resp := s.navigate(p.path)
			require.Equal(t, http.StatusOK, int(resp.Status), "GET %s", p.path)
			s.waitVisible(p.wait)
			s.waitLive()
			shot(p.name, sz)
		}
	}
	for _, p := range append(pages, struct{ name, path, wait string }{name: "login"}) {
		for _, sz := range []size{desktop, phone} {
			require.FileExists(t, filepath.Join(dir, p.name+sz.suffix+".png"))
		}
	}
}

// siteOverflow measures the page's width against the window's and names
// up to 15 elements of the main content (header and main) that reach past
// the window's edges, also inside a box that scrolls: what needs
// scrolling sideways to be seen is not usable on a phone. A diagram (the
// DAG, the waterfall) is the one exception: it scrolls inside its box.
const siteOverflow = `(() => {
	const iw = window.innerWidth, off = [];
	for (const el of document.querySelectorAll('body *')) {
		if (el.closest('.dag-wrap, .wf-wrap')) continue;
		const r = el.getBoundingClientRect();
		if (r.width === 0 && r.height === 0) continue;
		if ((r.right > iw + 0.5 || r.left < -0.5) && off.length < 15) {
			const cls = typeof el.className === 'string' && el.className ? '.' + el.className.trim().split(/\s+/).join('.') : '';
			const id = el.getAttribute('data-testid') ? '[' + el.getAttribute('data-testid') + ']' : '';
			off.push(el.tagName.toLowerCase() + cls + id + '→' + Math.round(r.right));
		}
	}
	return {sw: document.documentElement.scrollWidth, iw: iw, off: off};
})()`

// siteNodeStates is the data-status of each DAG node of a run page, by
// task name.
const siteNodeStates = `(() => {
	const m = {};
	for (const g of document.querySelectorAll('[data-testid=dag-node]')) {
		m[g.querySelector('text.name').textContent.trim()] = g.getAttribute('data-status');
	}
	return m;
})()`

// siteStatusObserver sets window.__cairnMarker and starts logging into
// window.__cairnStatusLog (task name → states) every data-status a DAG
// node of the page takes, whether the live script sets the attribute or
// replaces the graph with a re-fetched one. Attribute records give the
// value before each change, so two changes in one batch are both logged.
const siteStatusObserver = `(() => {
	window.__cairnMarker = 1;
	const log = window.__cairnStatusLog = {};
	const name = g => g.querySelector('text.name').textContent.trim();
	const push = (n, st) => { const h = (log[n] = log[n] || []); if (h[h.length - 1] !== st) h.push(st); };
	const record = g => push(name(g), g.getAttribute('data-status'));
	document.querySelectorAll('[data-testid=dag-node]').forEach(record);
	new MutationObserver(ms => {
		const touched = new Set();
		for (const m of ms) {
			if (m.type === 'attributes') {
				if (m.target.isConnected && m.target.matches('[data-testid=dag-node]')) {
					push(name(m.target), m.oldValue);
					touched.add(m.target);
				}
			} else {
				for (const n of m.addedNodes) {
					if (n.nodeType !== 1) continue;
					if (n.matches('[data-testid=dag-node]')) touched.add(n);
					n.querySelectorAll('[data-testid=dag-node]').forEach(g => touched.add(g));
				}
			}
		}
		touched.forEach(g => { if (g.isConnected) record(g); });
	}).observe(document.body, {subtree: true, childList: true, attributes: true, attributeOldValue: true, attributeFilter: ['data-status']});
})()`

// site is one test's server and browser tab.
type site struct {
	t   *testing.T
	url string          // http://127.0.0.1:PORT
	ctx context.Context // the tab; steps derive timeouts from it
}

// newSite gives t its own database, a demo server with both logins, and
// a browser tab.
func newSite(t *testing.T) *site {
	t.Helper()
	start := time.Now()
	db := pgtest.New(t)
	checkTruthAtEnd(t, db.SQL)
	srv := browser.StartServer(t, db.URL, nil,
		"--demo", "--admin-password", siteAdminPassword, "--readonly-password", siteReadonlyPassword)
	serverUp := time.Since(start)
	ctx := browser.NewContext(t)
	t.Logf("setup: database and server %s, browser %s", serverUp.Round(10*time.Millisecond), (time.Since(start) - serverUp).Round(10*time.Millisecond))
	return &site{t: t, url: srv.URL, ctx: ctx}
}

func (s *site) step(what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, d)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

// evalAs evaluates a JavaScript expression on the open page.
func evalAs[T any](s *site, js string, opts ...chromedp.EvaluateOption) T {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, siteStep)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, opts...))
	if err != nil {
		s.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

func (s *site) eval(js string) { s.t.Helper(); evalAs[chromedp.Void](s, js) }

// navigate loads a path of the site and returns the final response.
func (s *site) navigate(path string) *network.Response {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, siteStep)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(s.url+path))
	if err != nil {
		s.t.Fatalf("navigate %s: %v", path, err)
	}
	if resp == nil {
		s.t.Fatalf("navigate %s: no response", path)
	}
	return resp
}

// clickNavigate clicks what sel selects (a link or a submit button) and
// waits for the page it leads to; it returns that page's response.
func (s *site) clickNavigate(sel string) *network.Response {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, siteStep)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	for err != nil && staleNode(err) && ctx.Err() == nil {
		// A live refresh replaced the node between finding and clicking
		// it: nothing was clicked, so find it again.
		resp, err = chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(sel)))
	}
	if err != nil {
		s.t.Fatalf("click %s: %v", sel, err)
	}
	if resp == nil {
		s.t.Fatalf("click %s: no response", sel)
	}
	return resp
}

// staleNode reports whether err says a node the browser had found was gone
// by the time it was used.
func staleNode(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "node with given id") || strings.Contains(msg, "Could not compute box model") ||
		strings.Contains(msg, "Node is detached")
}

func (s *site) location() *url.URL {
	s.t.Helper()
	loc := evalAs[string](s, `location.href`)
	u, err := url.Parse(loc)
	if err != nil {
		s.t.Fatalf("location %q: %v", loc, err)
	}
	return u
}

func (s *site) waitVisible(sel string) {
	s.t.Helper()
	s.step("wait for "+sel, siteStep, chromedp.WaitVisible(chromedp.CSS(sel)))
}

func (s *site) fill(sel, value string) {
	s.t.Helper()
	s.step("fill "+sel, siteStep, chromedp.WaitVisible(chromedp.CSS(sel)), chromedp.Clear(chromedp.CSS(sel)), chromedp.SendKeys(chromedp.CSS(sel), value))
}

// text returns the trimmed text content of the first element sel selects,
// waiting for it to exist. It finds and reads the element in one
// evaluation: live fragments replace their nodes, and a node found by one
// protocol call can be gone by the next.
func (s *site) text(sel string) string {
	s.t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? {found: true, text: e.textContent.trim()} : {found: false}; })()`, strconv.Quote(sel))
	var got foundText
	s.poll(sel+" to exist", siteStep, func() bool {
		got = evalAs[foundText](s, js)
		return got.Found
	}, nil)
	return got.Text
}

// foundText is what text's evaluation returns.
type foundText struct {
	Found bool   `json:"found"`
	Text  string `json:"text"`
}

// attr returns an attribute of the first element sel selects, or "".
func (s *site) attr(sel, name string) string {
	s.t.Helper()
	return evalAs[string](s, fmt.Sprintf(`(() => { const e = document.querySelector(%s); return (e && e.getAttribute(%s)) || ''; })()`,
		strconv.Quote(sel), strconv.Quote(name)))
}

func (s *site) count(sel string) int {
	s.t.Helper()
	return evalAs[int](s, fmt.Sprintf(`document.querySelectorAll(%s).length`, strconv.Quote(sel)))
}

// poll checks cond every 100 ms until it holds, failing the test after
// within; state, when not nil, describes what was seen last.
func (s *site) poll(what string, within time.Duration, cond func() bool, state func() string) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	tick := time.NewTicker(sitePollTick)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			last := ""
			if state != nil {
				last = ": last seen " + state()
			}
			s.t.Fatalf("timed out after %s waiting for %s%s", within, what, last)
		}
		select {
		case <-tick.C:
		case <-s.ctx.Done():
			s.t.Fatalf("waiting for %s: browser gone: %v", what, s.ctx.Err())
		}
	}
}

func (s *site) pollText(sel, want string, within time.Duration) {
	s.t.Helper()
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%s); return e ? e.textContent.trim() : ''; })()`, strconv.Quote(sel))
	var got string
	s.poll(fmt.Sprintf("%s to read %q", sel, want), within, func() bool {
		got = evalAs[string](s, js)
		return got == want
	}, func() string { return strconv.Quote(got) })
}

func (s *site) pollAttr(sel, name, want string, within time.Duration) {
	s.t.Helper()
	var got string
	s.poll(fmt.Sprintf("%s %s=%q", sel, name, want), within, func() bool {
		got = s.attr(sel, name)
		return got == want
	}, func() string { return strconv.Quote(got) })
}

// waitLive waits until the page's websocket is connected.
func (s *site) waitLive() {
	s.t.Helper()
	s.pollAttr(`[data-testid=live-status]`, "data-live", "on", siteStep)
}

// login logs in through the login page, arriving there the way a user
// does: by asking for a page.
func (s *site) login(password string) {
	s.t.Helper()
	s.navigate("/")
	require.Equal(s.t, "/login", s.location().Path, "an unauthenticated visit must lead to the login page")
	s.fill(`[data-testid=password]`, password)
	resp := s.clickNavigate(`[data-testid=login-submit]`)
	require.Equal(s.t, http.StatusOK, int(resp.Status), "page after login")
	require.Equal(s.t, "/", s.location().Path)
	s.waitVisible(`[data-testid=role]`)
}

var runPathRe = regexp.MustCompile(`^/runs/([0-9]+)$`)

// enqueueForm starts a run with the "Start a run" form on /runs and
// returns its id; the browser is then on its run page.
func (s *site) enqueueForm(workflow, input string) int64 {
	s.t.Helper()
	resp := s.navigate("/runs")
	require.Equal(s.t, http.StatusOK, int(resp.Status))
	form := `[data-testid=enqueue-form]`
	s.step("open the Start a run form", siteStep,
		chromedp.Click(chromedp.CSS(`details:has(`+form+`) > summary`)),
		chromedp.WaitVisible(chromedp.CSS(form+` [data-testid=enqueue-submit]`)),
		chromedp.SetValue(chromedp.CSS(form+` select[name=workflow]`), workflow),
		chromedp.SetValue(chromedp.CSS(form+` textarea[name=input]`), input),
	)
	resp = s.clickNavigate(form + ` [data-testid=enqueue-submit]`)
	require.Equal(s.t, http.StatusOK, int(resp.Status), "run page after enqueue")
	m := runPathRe.FindStringSubmatch(s.location().Path)
	require.NotNil(s.t, m, "enqueue must lead to the run page, got %s", s.location())
	id, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(s.t, err)
	require.Equal(s.t, fmt.Sprintf("Started run #%d of %s.", id, workflow), s.text(`[data-testid=flash]`))
	require.Contains(s.t, s.text(`main h1`), workflow)
	var got map[string]any
	require.NoError(s.t, json.Unmarshal([]byte(s.text(`[data-testid=run-input]`)), &got))
	var want map[string]any
	require.NoError(s.t, json.Unmarshal([]byte(input), &want))
	require.Equal(s.t, want, got, "run input")
	return id
}

// attemptLabel is the task page's "Attempt" value, e.g. "2 of 3".
func (s *site) attemptLabel() string {
	s.t.Helper()
	return evalAs[string](s, `(() => {
		const dt = [...document.querySelectorAll('[data-testid=task-header] dt')].find(e => e.textContent.trim() === 'Attempt');
		return dt ? dt.nextElementSibling.textContent.trim() : '';
	})()`)
}

// apiQueuePaused asks the JSON API, with the browser's session, whether
// a queue is paused.
func (s *site) apiQueuePaused(name string) bool {
	s.t.Helper()
	var res struct {
		Status int `json:"status"`
		Body   struct {
			Queues []struct {
				Name   string `json:"name"`
				Paused bool   `json:"paused"`
			} `json:"queues"`
		} `json:"body"`
	}
	raw := evalAs[[]byte](s, `fetch('/api/queues', {credentials: 'same-origin'}).then(async r => ({status: r.status, body: await r.json()}))`, chromedp.EvalAwaitPromise)
	require.NoError(s.t, json.Unmarshal(raw, &res))
	require.Equal(s.t, http.StatusOK, res.Status, "GET /api/queues")
	for _, q := range res.Body.Queues {
		if q.Name == name {
			return q.Paused
		}
	}
	s.t.Fatalf("queue %q not in /api/queues: %s", name, raw)
	return false
}

// basicClient returns a function that sends a JSON request to the site
// with HTTP Basic credentials (an API client: no CSRF token needed) and
// returns the status and body.
func (s *site) basicClient(password string) func(method, path, body string) (int, string) {
	client := &http.Client{Timeout: siteStep}
	return func(method, path, body string) (int, string) {
		s.t.Helper()
		req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
		require.NoError(s.t, err)
		req.Header.Set("Content-Type", "application/json")
		req.SetBasicAuth("", password)
		res, err := client.Do(req)
		require.NoError(s.t, err)
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		require.NoError(s.t, err)
		return res.StatusCode, string(b)
	}
}

// apiTaskStates returns the status of each task of a run, by name, from
// the JSON API.
func (s *site) apiTaskStates(api func(method, path, body string) (int, string), runID int64) map[string]string {
	s.t.Helper()
	status, body := api("GET", "/api/runs/"+strconv.FormatInt(runID, 10), "")
	require.Equal(s.t, http.StatusOK, status, body)
	var res struct {
		Tasks []struct {
			Name   string `json:"name"`
			Status string `json:"status"`
		} `json:"tasks"`
	}
	require.NoError(s.t, json.Unmarshal([]byte(body), &res))
	out := map[string]string{}
	for _, tk := range res.Tasks {
		out[tk.Name] = tk.Status
	}
	return out
}

// sessionCookie returns the browser's session cookie for the site.
func (s *site) sessionCookie() *http.Cookie {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, siteStep)
	defer cancel()
	res, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{s.url + "/"}})
	require.NoError(s.t, err)
	for _, c := range res.Cookies {
		if c.Name == "cairn_session" {
			require.True(s.t, c.HTTPOnly, "the session cookie must be HttpOnly")
			return &http.Cookie{Name: c.Name, Value: c.Value}
		}
	}
	s.t.Fatalf("no cairn_session cookie in the browser")
	return nil
}
