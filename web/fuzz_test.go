package web_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store/pgtest"
	"github.com/cairnhq/cairn/web"
)

// quietEnv is a site over a database that changes only through its
// requests: the engine is not started (no claims, heartbeats or schedule
// fires), so a fingerprint of the tables taken before and after a request
// shows whether that request wrote anything. It holds a run (ready
// tasks), queue "default" and schedule "nightly".
//
// Its logs go to logs: a fuzz target may not call f.Log.
func quietEnv(t testing.TB, logs io.Writer) (*env, *client) {
	t.Helper()
	db := pgtest.New(t)
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	eng, err := engine.New(db.SQL, engine.Config{Logger: logger})
	require.NoError(t, err)
	require.NoError(t, eng.Register(engine.Workflow{Name: "wf", Tasks: []engine.Task{
		{Name: "a", Run: func(context.Context, *engine.TaskHandle) error { return nil }},
		{Name: "b", Deps: []string{"a"}, Run: func(context.Context, *engine.TaskHandle) error { return nil }},
	}}))
	ctx := context.Background()
	st := newStore(t, db.SQL, "")
	require.NoError(t, st.QueueEnsure(ctx, []string{"default"}))
	require.NoError(t, eng.CreateSchedule(ctx, engine.Schedule{Name: "nightly", Expression: "0 3 1 1 *", Workflow: "wf", Paused: true}))
	_, err = eng.Enqueue(ctx, "wf", map[string]any{"customer": "acme", "amount": 42}, engine.WithKey("seed"))
	require.NoError(t, err)
	srv, err := web.New(web.Config{
		Engine: eng, Reads: st, Logger: logger, AdminPassword: adminPW,
		ListenAddr: "127.0.0.1:0", SessionSecret: []byte("0123456789abcdef0123456789abcdef"),
	})
	require.NoError(t, err)
	ts := httptest.NewServer(checkContract(t, srv.Handler()))
	t.Cleanup(ts.Close)
	e := &env{db: db, eng: eng, st: st, srv: srv, ts: ts}
	return e, e.loggedIn(t, adminPW)
}

// fingerprint is a cheap digest of every row the site can change: runs,
// tasks, queues, schedules and the events' count and last id.
func fingerprint(t testing.TB, db *sql.DB) string {
	t.Helper()
	var s string
	err := db.QueryRow(`SELECT concat_ws('|',
		(SELECT md5(coalesce(string_agg(r::text, ',' ORDER BY id), '')) FROM cairn.runs r),
		(SELECT md5(coalesce(string_agg(x::text, ',' ORDER BY id), '')) FROM cairn.tasks x),
		(SELECT md5(coalesce(string_agg(q::text, ',' ORDER BY name), '')) FROM cairn.queues q),
		(SELECT md5(coalesce(string_agg(s::text, ',' ORDER BY name), '')) FROM cairn.schedules s),
		(SELECT count(*) || ':' || coalesce(max(id), 0) FROM cairn.task_events))`).Scan(&s)
	require.NoError(t, err)
	return s
}

// fuzzRequest builds request number ep of the fuzz templates from the
// strings a and b and the number n; ok is false when no valid HTTP request
// has that shape.
func fuzzRequest(base, csrf string, ep uint8, a, b string, n int64) (req *http.Request, ok bool) {
	num := strconv.FormatInt(n, 10)
	q := func(kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	var method, path, ctype, body string
	get := func(p string) { method, path = http.MethodGet, p }
	postJSON := func(p, b string) { method, path, ctype, body = http.MethodPost, p, "application/json", b }
	postForm := func(p string, kv ...string) {
		method, path, ctype, body = http.MethodPost, p, "application/x-www-form-urlencoded", q(append(kv, "csrf_token", csrf)...)
	}
	switch ep % 24 {
	case 0:
		get("/api/runs?" + q("workflow", a, "q", b))
	case 1:
		get("/api/runs?" + q("status", a, "from", b, "limit", num))
	case 2:
		get("/runs?" + q("q", a, "workflow", b, "to", num))
	case 3:
		get("/fragments/runs?" + q("after", a, "before", b))
	case 4:
		get("/api/runs?" + a) // raw query text
	case 5:
		postJSON("/api/runs", `{"workflow":"wf","key":"`+a+`","priority":`+num+`}`)
	case 6:
		postJSON("/api/runs", `{"workflow":"wf","input":`+a+`,"queue":"`+b+`"}`)
	case 7:
		postJSON("/api/runs", `{"workflow":"`+a+`","key":"`+b+`"}`)
	case 8:
		postJSON("/api/queues/"+url.PathEscape(a)+"/pause", "")
	case 9:
		postJSON("/api/queues/default/cap", `{"max_running":`+a+`}`)
	case 10:
		postJSON("/api/schedules/"+url.PathEscape(a)+"/"+[]string{"fire", "pause", "resume"}[n&3%3], "")
	case 11:
		postForm("/runs", "workflow", "wf", "key", a, "input", b)
	case 12:
		postForm("/queues/"+url.PathEscape(a)+"/cap", "max_running", b)
	case 13:
		postJSON("/api/runs/bulk", `{"action":"`+a+`","dry_run":true,"filter":{"q":"`+b+`"}}`)
	case 14:
		postForm("/runs/bulk", "action", a, "q", b, "workflow", "wf")
	case 15:
		get("/api/runs/" + url.PathEscape(a))
	case 16:
		get("/api/tasks/" + url.PathEscape(a) + "?" + q("x", b))
	case 17:
		get("/api/workers?" + q("limit", a))
	case 18:
		get("/runs/" + a) // raw path text
	case 19:
		postForm("/queues/default/cap", "max_running", a)
	case 20:
		postJSON("/api/runs", `{"workflow":"wf","input":{"k":"`+a+`","n":`+b+`},"run_at":"`+num+`"}`)
	case 21:
		postJSON("/api/queues/"+a+"/resume", "") // raw path text
	case 22:
		postForm("/runs", "workflow", a, "input", `{"x":`+b+`}`, "key", num)
	case 23:
		postJSON("/api/runs/bulk", `{"action":"cancel","dry_run":true,"filter":{"workflow":"`+a+`","status":"`+b+`","from":"`+num+`"}}`)
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil || strings.ContainsFunc(req.URL.RequestURI(), func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, false // not an HTTP request line: net/http's own 400, before any handler
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if strings.HasPrefix(path, "/api/") {
		req.Header.Set("X-CSRF-Token", csrf)
	}
	return req, true
}

// FuzzAPI sends requests built from hostile strings and numbers to a
// real site over a real engine and database: no request may get a 5xx,
// an API error must be a JSON {"error": ...}, and a refused (4xx)
// request must change no row.
func FuzzAPI(f *testing.F) {
	hostile := []string{
		"\x00", "a\x00b", "%00", "\xff\xfe", "%FF%FE", `\u0000`, `\ud800`, `"\ud800"`, `{"a":"\ud800"}`, `{"a":"\u0000"}`,
		"1e1000000", `{"a":1e1000000}`, "a:1e1000000", "99999999999", "-1", "-99999999999", "0", "../../etc/passwd", "..%2F..",
		"é ünïcödé ✓ 🚀", "'; DROP TABLE runs; --", `" OR 1=1 --`, "?schema", "$1", strings.Repeat("x", 5000),
		strings.Repeat("[", 20000), "a:" + strings.Repeat("[", 500), "\r\n\t\a", "0000-01-01", "99999999999999999_1", "",
		"default", "nightly", "wf", "cancel", "retry", "customer:acme", `amount:42`, `a:"\u0000"`, `a:["\ud800"]`,
	}
	for i, a := range hostile {
		for ep := range 24 {
			b := hostile[(i+ep)%len(hostile)]
			f.Add(uint8(ep), a, b, int64([]int64{99999999999, -1, 0, 1, 2147483648}[(i+ep)%5]))
		}
	}
	logs := &lockedBuffer{}
	e, c := quietEnv(f, logs)
	base, csrf := e.ts.URL, c.csrf
	fp := fingerprint(f, e.db.SQL)
	f.Fuzz(func(t *testing.T, ep uint8, a, b string, n int64) {
		req, ok := fuzzRequest(base, csrf, ep, a, b, n)
		if !ok {
			return
		}
		res, err := c.hc.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		require.NoError(t, err)
		what := req.Method + " " + req.URL.String()
		require.Less(t, res.StatusCode, 500, "%s: %s\nlog: %s", what, body, logs.take())
		if strings.HasPrefix(req.URL.Path, "/api/") && res.StatusCode >= 400 {
			var out map[string]any
			require.NoError(t, json.Unmarshal(body, &out), "%s: error body is not JSON: %s", what, body)
			require.NotEmpty(t, out["error"], "%s: %s", what, body)
		}
		now := fingerprint(t, e.db.SQL)
		if res.StatusCode >= 400 {
			require.Equal(t, fp, now, "%s answered %d (%s) but changed rows", what, res.StatusCode, body)
		}
		fp = now
		logs.take()
	})
}

// lockedBuffer collects the site's logs for the failure message.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// take returns what was logged since the last take.
func (b *lockedBuffer) take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	b.buf.Reset()
	return s
}
