package web_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/web"
)

// callbackEnv is a site whose workflow "approval" mints callback URLs
// for the signal "approve" (as many as the run's input says), hands them
// to the test and returns the payload it gets.
func callbackEnv(t *testing.T) (*env, chan []string) {
	t.Helper()
	e := setup(t, func(c *engine.Config, _ *web.Config) { c.CallbackBaseURL = "https://cairn.example.com/" })
	urls := make(chan []string, 4)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "approval", Tasks: []engine.Task{{
		Name: "t",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			var in struct{ N int }
			if err := h.Input(&in); err != nil {
				return err
			}
			var list []string
			for range in.N {
				u, err := h.CallbackURL(ctx, "approve", time.Hour)
				if err != nil {
					return err
				}
				list = append(list, strings.TrimPrefix(u, "https://cairn.example.com"))
			}
			urls <- list
			got, err := h.AwaitSignal(ctx, "approve", 0)
			if err != nil {
				return err
			}
			return h.SetOutput(got)
		},
	}}}))
	return e, urls
}

// approval enqueues a run of "approval" minting n URLs and waits until
// its task is parked in its signal wait; it returns the task and the
// URLs' paths.
func (e *env) approval(t *testing.T, urls chan []string, n int) (store.Task, []string) {
	t.Helper()
	run, err := e.eng.Enqueue(context.Background(), "approval", map[string]int{"N": n})
	require.NoError(t, err)
	var paths []string
	select {
	case paths = <-urls:
	case <-time.After(15 * time.Second):
		t.Fatal("no callback URL minted")
	}
	task := e.task(t, run.ID, "t")
	e.parkedTask(t, task.ID, store.WaitKindSignal)
	return task, paths
}

// post posts body as JSON with no session, cookie or CSRF token.
func (c *client) post(path, ctype, body string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", ctype)
	return c.do(req)
}

// TestCallbackURLDeliversOnce: a task parked in AwaitSignal("approve")
// gets the body POSTed to its callback URL, with no login, and completes;
// the URL then answers 410, and a forged one 403.
func TestCallbackURLDeliversOnce(t *testing.T) {
	t.Parallel()
	e, urls := callbackEnv(t)
	task, paths := e.approval(t, urls, 1)
	path := paths[0]
	require.Regexp(t, `^/callbacks/[A-Za-z0-9_-]{43}$`, path)
	anon := e.client(t)

	// GET: a page whose form POSTs; it changes nothing and sets no cookie.
	doc := anon.doc(path+"?payload="+url.QueryEscape(`{"approved": true}`), http.StatusOK)
	require.Equal(t, "post", doc.Find("form").AttrOr("method", ""))
	require.Equal(t, `{"approved": true}`, doc.Find(`textarea[name="payload"]`).Text())
	base, err := url.Parse(e.ts.URL)
	require.NoError(t, err)
	require.Empty(t, anon.hc.Jar.Cookies(base), "no session")

	// A forged token: 403, the task untouched.
	forged := "/callbacks/" + base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	for _, p := range []string{forged, "/callbacks/nope"} {
		res, body := anon.post(p, "application/json", `{"approved": true}`)
		require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	}
	// Not JSON: 400.
	res, body := anon.post(path, "application/json", `{"approved": `)
	require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
	sigs, err := e.st.SignalListByTask(context.Background(), task.ID)
	require.NoError(t, err)
	require.Empty(t, sigs)

	res, body = anon.post(path, "application/json", `{"approved": true}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `"ok": true`)
	require.Empty(t, anon.hc.Jar.Cookies(base), "no session")
	run := e.waitRun(t, task.RunID, store.RunCompleted)
	done := e.task(t, run.ID, "t")
	require.JSONEq(t, `{"approved": true}`, string(done.Output))
	var by string
	require.NoError(t, e.db.SQL.QueryRow(`SELECT used_by FROM cairn.callbacks WHERE task_id = $1`, task.ID).Scan(&by))
	require.Equal(t, "127.0.0.1", by, "the caller's address")

	res, body = anon.post(path, "application/json", `{"approved": false}`)
	require.Equal(t, http.StatusGone, res.StatusCode, body)
	require.Contains(t, body, "used already")
}

// TestCallbackURLRefusals: an expired URL answers 403 and leaves the task
// waiting; a URL whose task moved on (another URL answered its wait)
// answers 410; the confirmation page's form delivers.
func TestCallbackURLRefusals(t *testing.T) {
	t.Parallel()
	e, urls := callbackEnv(t)
	task, paths := e.approval(t, urls, 3)
	anon := e.client(t)
	hash := sha256.Sum256([]byte(strings.TrimPrefix(paths[0], "/callbacks/")))
	_, err := e.db.SQL.Exec(`UPDATE cairn.callbacks SET expires_at = now() - interval '1 second' WHERE token_hash = $1`, hash[:])
	require.NoError(t, err)
	res, body := anon.post(paths[0], "application/json", `"late"`)
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)
	tk, err := e.st.TaskGet(context.Background(), task.ID)
	require.NoError(t, err)
	require.Equal(t, store.StatusDeferred, tk.Status, "the task is untouched")
	sigs, err := e.st.SignalListByTask(context.Background(), task.ID)
	require.NoError(t, err)
	require.Empty(t, sigs)

	// The confirmation page's form (a browser's POST: no CSRF token).
	res, body = anon.post(paths[1], "application/x-www-form-urlencoded", url.Values{"payload": {`"yes"`}}.Encode())
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, res.Header.Get("Content-Type"), "text/html")
	require.Contains(t, body, "Delivered.")
	run := e.waitRun(t, task.RunID, store.RunCompleted)
	require.JSONEq(t, `"yes"`, string(e.task(t, run.ID, "t").Output))

	// The third URL's task moved on.
	res, body = anon.post(paths[2], "application/json", `"again"`)
	require.Equal(t, http.StatusGone, res.StatusCode, body)
	require.Contains(t, body, "moved on")
	sigs, err = e.st.SignalListByTask(context.Background(), task.ID)
	require.NoError(t, err)
	require.Len(t, sigs, 1)
}
