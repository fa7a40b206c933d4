package web_test

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
	"github.com/cairnhq/cairn/web"
)

func TestMain(m *testing.M) {
	code := pgtest.Run(m)
	if code == 0 {
		code = checkOpenAPICoverage()
	}
	os.Exit(code)
}

// The engine is what the site expects of it.
var _ web.Engine = (*engine.Engine)(nil)

const (
	adminPW    = "admin-secret"
	readonlyPW = "readonly-secret"
)

// env is one test's database, engine and site.
type env struct {
	db  *pgtest.DB
	eng *engine.Engine
	st  *store.Store
	srv *web.Server
	ts  *httptest.Server
	// failA makes task "a" of workflow "wf" fail permanently.
	failA *atomic.Bool
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("CAIRN_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: level}))
}

// setup starts an engine with workflow "wf" (a -> b; a logs, outputs
// {"a": 1} and fails permanently while failA is set; b outputs {"b": 2})
// and a site with the admin and read-only passwords, then serves it and
// runs its hub. mutate adjusts the configs before use.
func setup(t *testing.T, mutate func(*engine.Config, *web.Config)) *env {
	t.Helper()
	db := pgtest.New(t)
	logger := testLogger(t)
	ecfg := engine.Config{
		DatabaseURL:       db.URL,
		Logger:            logger,
		PollInterval:      200 * time.Millisecond,
		HeartbeatInterval: 200 * time.Millisecond,
		LeaseDuration:     2 * time.Second,
		RescueInterval:    200 * time.Millisecond,
		ShutdownGrace:     2 * time.Second,
	}
	wcfg := web.Config{
		Logger: logger, AdminPassword: adminPW, ReadonlyPassword: readonlyPW,
		ListenAddr: "127.0.0.1:0", SessionSecret: []byte("0123456789abcdef0123456789abcdef"),
	}
	failA := &atomic.Bool{}
	if mutate != nil {
		mutate(&ecfg, &wcfg)
	}
	eng, err := engine.New(db.SQL, ecfg)
	require.NoError(t, err)
	require.NoError(t, eng.Register(engine.Workflow{Name: "wf", Tasks: []engine.Task{
		{Name: "a", Run: func(ctx context.Context, h *engine.TaskHandle) error {
			h.Logger().Info("working on a", slog.Int("step", 1))
			if failA.Load() {
				return engine.Permanent(errors.New("a exploded"))
			}
			return h.SetOutput(map[string]int{"a": 1})
		}},
		{Name: "b", Deps: []string{"a"}, Run: func(ctx context.Context, h *engine.TaskHandle) error {
			return h.SetOutput(map[string]int{"b": 2})
		}},
	}}))
	require.NoError(t, eng.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = eng.Shutdown(ctx)
	})
	st := newStore(t, db.SQL, ecfg.Schema)
	wcfg.Engine, wcfg.Reads = eng, st
	srv, err := web.New(wcfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	hubDone := make(chan error, 1)
	go func() { hubDone <- srv.Run(ctx) }()
	ts := httptest.NewServer(checkContract(t, srv.Handler()))
	t.Cleanup(func() {
		cancel()
		<-hubDone
		ts.Close()
	})
	return &env{db: db, eng: eng, st: st, srv: srv, ts: ts, failA: failA}
}

// newStore returns a store over db in schema (the engine's default when
// empty): the site's reads, and a test's own.
func newStore(t testing.TB, db *sql.DB, schema string) *store.Store {
	t.Helper()
	st, err := store.New(db, cmp.Or(schema, engine.DefaultSchema))
	require.NoError(t, err)
	return st
}

// eventually polls cond until it holds or within passes.
func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval of a condition with a deadline
	}
}

// waitRun waits until a run reaches status.
func (e *env) waitRun(t testing.TB, runID int64, status string) *store.Run {
	t.Helper()
	var run *store.Run
	eventually(t, 15*time.Second, "run "+strconv.FormatInt(runID, 10)+" to be "+status, func() bool {
		r, err := e.st.RunGet(context.Background(), runID)
		require.NoError(t, err)
		run = r
		return r.Status == status
	})
	return run
}

func (e *env) enqueue(t testing.TB, input any) int64 {
	t.Helper()
	run, err := e.eng.Enqueue(context.Background(), "wf", input)
	require.NoError(t, err)
	return run.ID
}

func (e *env) task(t testing.TB, runID int64, name string) store.Task {
	t.Helper()
	tasks, err := e.st.TaskListByRun(context.Background(), runID)
	require.NoError(t, err)
	for _, tk := range tasks {
		if tk.Name == name {
			return tk
		}
	}
	t.Fatalf("no task %q in run %d", name, runID)
	return store.Task{}
}

// client is a browser: cookies, no redirect following, the CSRF token of
// its session.
type client struct {
	t    testing.TB
	base string
	hc   *http.Client
	csrf string
}

func (e *env) client(t testing.TB) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, base: e.ts.URL, hc: &http.Client{
		Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// loggedIn returns a client logged in with password and holding its CSRF token.
func (e *env) loggedIn(t testing.TB, password string) *client {
	c := e.client(t)
	res, _ := c.postForm("/login", url.Values{"password": {password}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	doc := c.doc("/", http.StatusOK)
	c.csrf, _ = doc.Find(`meta[name="csrf-token"]`).Attr("content")
	require.NotEmpty(t, c.csrf)
	return c
}

func (c *client) do(req *http.Request) (*http.Response, string) {
	c.t.Helper()
	res, err := c.hc.Do(req)
	require.NoError(c.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(c.t, err)
	return res, string(b)
}

func (c *client) get(path string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+path, nil)
	require.NoError(c.t, err)
	return c.do(req)
}

// doc GETs path, asserts the status and parses the HTML.
func (c *client) doc(path string, status int) *goquery.Document {
	c.t.Helper()
	res, body := c.get(path)
	require.Equal(c.t, status, res.StatusCode, "GET %s: %s", path, body)
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(body))
	require.NoError(c.t, err)
	return doc
}

// postForm posts a form; the client's CSRF token is added unless vals has one.
func (c *client) postForm(path string, vals url.Values) (*http.Response, string) {
	c.t.Helper()
	if vals == nil {
		vals = url.Values{}
	}
	if c.csrf != "" && !vals.Has("csrf_token") {
		vals.Set("csrf_token", c.csrf)
	}
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(vals.Encode()))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}

// postJSON posts a JSON body to the API with the CSRF header.
func (c *client) postJSON(path, body string) (*http.Response, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.base+path, strings.NewReader(body))
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	if c.csrf != "" {
		req.Header.Set("X-CSRF-Token", c.csrf)
	}
	return c.do(req)
}

func testid(id string) string { return `[data-testid="` + id + `"]` }
