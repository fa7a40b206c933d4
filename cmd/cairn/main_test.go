package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
	"github.com/cairnhq/cairn/web"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	adminPW    = "admin-secret"
	readonlyPW = "readonly-secret"
	waitFor    = 15 * time.Second
)

// server is one test's database, engine and site, served over HTTP the
// way cmd/server wires them.
type server struct {
	db  *pgtest.DB
	eng *engine.Engine
	st  *store.Store
	url string
	// failA makes task "a" of workflow "wf" fail permanently.
	failA *atomic.Bool
	// stopHub ends the site's live updates (as a server shutdown does)
	// and waits for them to end.
	stopHub func()
	// front is the handler url serves: the site, or a stand-in while
	// the site is down; newSite starts another site on the same engine
	// (a restarted server) and returns its handler and stopHub.
	front   *atomic.Pointer[http.Handler]
	newSite func() (http.Handler, func())
}

// setup starts an engine with workflow "wf" (a -> b) and the site with an
// admin and a read-only password.
func setup(t *testing.T) *server {
	t.Helper()
	db := pgtest.New(t)
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	eng, err := engine.New(db.SQL, engine.Config{
		DatabaseURL:       db.URL,
		Logger:            logger,
		PollInterval:      200 * time.Millisecond,
		HeartbeatInterval: 200 * time.Millisecond,
		LeaseDuration:     2 * time.Second,
		RescueInterval:    200 * time.Millisecond,
		ShutdownGrace:     2 * time.Second,
	})
	require.NoError(t, err)
	failA := &atomic.Bool{}
	require.NoError(t, eng.Register(engine.Workflow{Name: "wf", Tasks: []engine.Task{
		{Name: "a", Run: func(ctx context.Context, h *engine.TaskHandle) error {
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
	st, err := store.New(db.SQL, engine.DefaultSchema)
	require.NoError(t, err)
	srv := &server{db: db, eng: eng, st: st, failA: failA, front: &atomic.Pointer[http.Handler]{}}
	srv.newSite = func() (http.Handler, func()) {
		site, err := web.New(web.Config{
			Engine: eng, Reads: st, Logger: logger,
			AdminPassword: adminPW, ReadonlyPassword: readonlyPW,
			ListenAddr: "127.0.0.1:0", SessionSecret: []byte("0123456789abcdef0123456789abcdef"),
		})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		hubDone := make(chan error, 1)
		go func() { hubDone <- site.Run(ctx) }()
		stopHub := sync.OnceFunc(func() {
			cancel()
			<-hubDone
		})
		t.Cleanup(stopHub)
		return site.Handler(), stopHub
	}
	var h http.Handler
	h, srv.stopHub = srv.newSite()
	srv.front.Store(&h)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*srv.front.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	srv.url = ts.URL
	return srv
}

// result is what one invocation of the command printed and returned.
type result struct {
	code           int
	stdout, stderr string
}

// cairnWith runs the command line in process with the environment vars
// and prompt (nil: no terminal).
func (s *server) cairnWith(t *testing.T, vars map[string]string, prompt func() (string, error), args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e := env{getenv: func(k string) string { return vars[k] }, stdin: strings.NewReader(""), prompt: prompt}
	code := run(context.Background(), args, e, &stdout, &stderr)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// cairn runs the command line as the admin.
func (s *server) cairn(t *testing.T, args ...string) result {
	t.Helper()
	return s.cairnWith(t, map[string]string{"CAIRN_URL": s.url, "CAIRN_PASSWORD": adminPW, "USER": "tester"}, nil, args...)
}

// ok runs the command line as the admin and requires exit 0.
func (s *server) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := s.cairn(t, args...)
	require.Equal(t, exitOK, r.code, "cairn %v: stderr %q", args, r.stderr)
	return r.stdout
}

// eventually polls cond until it holds, failing the test after waitFor.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitFor, what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval of a condition with a deadline
	}
}

func (s *server) waitRun(t *testing.T, id int64, status string) {
	t.Helper()
	eventually(t, "run "+strconv.FormatInt(id, 10)+" "+status, func() bool {
		r, err := s.st.RunGet(context.Background(), id)
		require.NoError(t, err)
		return r.Status == status
	})
}

func (s *server) task(t *testing.T, runID int64, name string) store.Task {
	t.Helper()
	tasks, err := s.st.TaskListByRun(context.Background(), runID)
	require.NoError(t, err)
	for _, tk := range tasks {
		if tk.Name == name {
			return tk
		}
	}
	t.Fatalf("no task %q in run %d", name, runID)
	return store.Task{}
}

// rowOf returns the table line whose first cell is first.
func rowOf(t *testing.T, table, first string) []string {
	t.Helper()
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == first {
			return f
		}
	}
	t.Fatalf("no row %q in\n%s", first, table)
	return nil
}

func TestRunsEnqueueListShow(t *testing.T) {
	t.Parallel()
	s := setup(t)

	// The queue is paused while the key is checked: a key is held only
	// while its run is live, and the engine would finish the run (and
	// free the key) between two enqueues.
	ctx := context.Background()
	require.NoError(t, s.eng.PauseQueue(ctx, "default"))

	// Enqueue: input from a file, table output.
	file := filepath.Join(t.TempDir(), "in.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"customer": "acme", "n": 7}`), 0o600))
	out := s.ok(t, "runs", "enqueue", "wf", "--input", "@"+file, "--key", "k1")
	var id int64
	_, err := fmt.Sscanf(out, "enqueued run %d of wf\n", &id)
	require.NoError(t, err, "output %q", out)
	run, err := s.st.RunGet(context.Background(), id)
	require.NoError(t, err)
	require.JSONEq(t, `{"customer": "acme", "n": 7}`, string(run.Input))
	require.Equal(t, "k1", *run.IdempotencyKey)

	// The same key again returns that run; --json prints the API's answer.
	out = s.ok(t, "--json", "runs", "enqueue", "wf", "--input", `{"n": 8}`, "--key", "k1")
	var enq struct {
		ID       int64 `json:"id"`
		Existing bool  `json:"existing"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &enq))
	require.Equal(t, id, enq.ID)
	require.True(t, enq.Existing)
	require.Contains(t, s.ok(t, "runs", "enqueue", "wf", "--key", "k1"), "already holds key k1")
	require.NoError(t, s.eng.ResumeQueue(ctx, "default"))

	other := s.ok(t, "runs", "enqueue", "wf", "--json")
	var second struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(other), &second))
	s.waitRun(t, id, "completed")
	s.waitRun(t, second.ID, "completed")

	// List, as a table and as JSON, with filters.
	table := s.ok(t, "runs", "list", "--workflow", "wf", "--status", "completed")
	require.Contains(t, table, "WORKFLOW")
	r := rowOf(t, table, strconv.FormatInt(id, 10))
	require.Equal(t, []string{"wf", "completed", "2/2", "0"}, r[1:5])
	require.Equal(t, "k1", r[len(r)-1])
	rowOf(t, table, strconv.FormatInt(second.ID, 10))

	var list struct {
		Runs []struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
		} `json:"runs"`
		Next string `json:"next_cursor"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok(t, "runs", "list", "--json", "--limit", "1")), &list))
	require.Len(t, list.Runs, 1)
	require.Equal(t, second.ID, list.Runs[0].ID, "newest first")
	require.NotEmpty(t, list.Next)
	res := s.cairn(t, "runs", "list", "--limit", "1")
	require.Contains(t, res.stderr, "more runs: add --after "+list.Next)

	failed := s.cairn(t, "runs", "list", "--status", "failed")
	require.Equal(t, exitOK, failed.code)
	require.NotContains(t, failed.stdout, "completed")
	require.Contains(t, failed.stderr, "no runs match")

	// Show, as a table and as JSON.
	show := s.ok(t, "runs", "show", strconv.FormatInt(id, 10))
	require.Contains(t, show, "completed")
	require.Contains(t, show, `"customer":"acme"`)
	a := s.task(t, id, "a")
	ra := rowOf(t, show, strconv.FormatInt(a.ID, 10))
	require.Equal(t, []string{"a", "completed", "1/3"}, ra[1:4])
	rowOf(t, show, strconv.FormatInt(s.task(t, id, "b").ID, 10))

	var detail struct {
		Run struct {
			ID int64 `json:"id"`
		} `json:"run"`
		Tasks []struct {
			Name string `json:"name"`
		} `json:"tasks"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok(t, "runs", "show", strconv.FormatInt(id, 10), "--json")), &detail))
	require.Equal(t, id, detail.Run.ID)
	require.Len(t, detail.Tasks, 2)
}

func TestTasksRetryAndSignal(t *testing.T) {
	t.Parallel()
	s := setup(t)
	s.failA.Store(true)
	run, err := s.eng.Enqueue(context.Background(), "wf", map[string]any{})
	require.NoError(t, err)
	s.waitRun(t, run.ID, "failed")
	a := s.task(t, run.ID, "a")

	show := s.ok(t, "runs", "show", strconv.FormatInt(run.ID, 10))
	require.Contains(t, show, "a exploded")
	list := s.ok(t, "runs", "list", "--status", "failed")
	rowOf(t, list, strconv.FormatInt(run.ID, 10))

	s.failA.Store(false)
	out := s.ok(t, "tasks", "retry", strconv.FormatInt(a.ID, 10))
	require.Equal(t, "Task #"+strconv.FormatInt(a.ID, 10)+" sent back to ready.\n", out)
	s.waitRun(t, run.ID, "completed")

	// Retrying a completed task is the API's 409, with its message.
	res := s.cairn(t, "tasks", "retry", strconv.FormatInt(a.ID, 10))
	require.Equal(t, exitError, res.code)
	require.Empty(t, res.stdout)
	require.True(t, strings.HasPrefix(res.stderr, "cairn: "), res.stderr)
	require.Contains(t, res.stderr, "completed")

	// A signal to a finished task is refused by the API too; a bad payload
	// is a usage error that sends nothing.
	res = s.cairn(t, "tasks", "signal", strconv.FormatInt(a.ID, 10), "approve", "--payload", `{"ok":true}`)
	require.Equal(t, exitError, res.code, res.stderr)
	require.Contains(t, res.stderr, "cairn: ")
	res = s.cairn(t, "tasks", "signal", strconv.FormatInt(a.ID, 10), "approve", "--payload", `{ok`)
	require.Equal(t, exitUsage, res.code)
	require.Contains(t, res.stderr, "--payload: not valid JSON")

	// A signal to a task that has not run yet is stored for its wait.
	s.ok(t, "queues", "pause", "default")
	waiting, err := s.eng.Enqueue(context.Background(), "wf", map[string]any{})
	require.NoError(t, err)
	wa := s.task(t, waiting.ID, "a")
	out = s.ok(t, "tasks", "signal", strconv.FormatInt(wa.ID, 10), "approve", "--payload", `{"ok":true}`)
	require.Equal(t, `Signal "approve" sent to task #`+strconv.FormatInt(wa.ID, 10)+".\n", out)
	sigs, err := s.st.SignalListByTask(context.Background(), wa.ID)
	require.NoError(t, err)
	require.Len(t, sigs, 1)
	require.Equal(t, "approve", sigs[0].Name)
	require.JSONEq(t, `{"ok":true}`, string(sigs[0].Payload))
}

func TestQueuesPauseResumeCap(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()

	require.Equal(t, "Queue default paused.\n", s.ok(t, "queues", "pause", "default"))
	q, err := s.st.QueueGet(ctx, "default")
	require.NoError(t, err)
	require.True(t, q.Paused)
	require.Equal(t, []string{"default", "paused", "none"}, rowOf(t, s.ok(t, "queues", "list"), "default")[:3])

	require.Equal(t, "Queue default resumed.\n", s.ok(t, "queues", "resume", "default"))
	q, err = s.st.QueueGet(ctx, "default")
	require.NoError(t, err)
	require.False(t, q.Paused)

	require.Equal(t, "Queue default capped at 3 running tasks.\n", s.ok(t, "queues", "cap", "default", "3"))
	require.Equal(t, []string{"default", "active", "3"}, rowOf(t, s.ok(t, "queues", "list"), "default")[:3])
	var list struct {
		Queues []struct {
			Name       string `json:"name"`
			MaxRunning *int   `json:"max_running"`
		} `json:"queues"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok(t, "queues", "list", "--json")), &list))
	require.Len(t, list.Queues, 1)
	require.Equal(t, 3, *list.Queues[0].MaxRunning)

	require.Equal(t, "Queue default has no cap now.\n", s.ok(t, "queues", "cap", "default", "none"))
	q, err = s.st.QueueGet(ctx, "default")
	require.NoError(t, err)
	require.Nil(t, q.MaxRunning)
}

func TestSchedulesListFirePause(t *testing.T) {
	t.Parallel()
	s := setup(t)
	require.NoError(t, s.eng.CreateSchedule(context.Background(), engine.Schedule{
		Name: "nightly", Expression: "0 3 * * *", Workflow: "wf", Input: map[string]any{"from": "cron"},
	}))

	table := s.ok(t, "schedules", "list")
	require.Equal(t, []string{"nightly", "wf", "0", "3", "*", "*", "*", "UTC", "active"}, rowOf(t, table, "nightly")[:9])

	out := s.ok(t, "schedules", "fire", "nightly")
	var id int64
	_, err := fmt.Sscanf(out, "Schedule nightly fired: run #%d.\n", &id)
	require.NoError(t, err, "output %q", out)
	run, err := s.st.RunGet(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, "wf", run.Workflow)
	require.JSONEq(t, `{"from": "cron"}`, string(run.Input))

	var fired struct {
		RunID int64 `json:"run_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok(t, "schedules", "fire", "nightly", "--json")), &fired))
	require.Greater(t, fired.RunID, id)

	require.Equal(t, "Schedule nightly paused.\n", s.ok(t, "schedules", "pause", "nightly"))
	require.Equal(t, "paused", rowOf(t, s.ok(t, "schedules", "list"), "nightly")[8])
	var list struct {
		Schedules []struct {
			Name   string `json:"name"`
			Paused bool   `json:"paused"`
		} `json:"schedules"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok(t, "--json", "schedules", "list")), &list))
	require.Len(t, list.Schedules, 1)
	require.True(t, list.Schedules[0].Paused)
	require.Equal(t, "Schedule nightly resumed.\n", s.ok(t, "schedules", "resume", "nightly"))

	res := s.cairn(t, "schedules", "fire", "nope")
	require.Equal(t, exitError, res.code)
	require.Equal(t, "cairn: fire schedule \"nope\": not found\n", res.stderr)
}

func TestWorkers(t *testing.T) {
	t.Parallel()
	s := setup(t)
	table := s.ok(t, "workers")
	require.True(t, strings.HasPrefix(table, "WORKER"), table)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	require.Len(t, lines, 2, table)
	f := strings.Fields(lines[1])
	require.Contains(t, f, "running")
	require.Contains(t, f, "default:4")

	var list struct {
		Workers []struct {
			Status string `json:"status"`
			Slots  int    `json:"slots"`
		} `json:"workers"`
	}
	require.NoError(t, json.Unmarshal([]byte(s.ok(t, "workers", "--json")), &list))
	require.Len(t, list.Workers, 1)
	require.Equal(t, "running", list.Workers[0].Status)
	require.Equal(t, 4, list.Workers[0].Slots)
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	s := setup(t)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{nil, "no command given"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"runs"}, "runs: give one of: list, show, enqueue"},
		{[]string{"runs", "destroy"}, `unknown command "runs destroy"`},
		{[]string{"runs", "list", "--colour", "red"}, "flag provided but not defined: -colour"},
		{[]string{"--nope", "workers"}, "flag provided but not defined: -nope"},
		{[]string{"runs", "show"}, "runs show: missing argument (RUN)"},
		{[]string{"runs", "show", "1", "2"}, `runs show: unexpected argument "2"`},
		{[]string{"runs", "show", "abc"}, `run id "abc": must be a positive whole number`},
		{[]string{"tasks", "retry", "0"}, `task id "0": must be a positive whole number`},
		{[]string{"tasks", "signal", "7"}, "tasks signal: missing argument (TASK NAME)"},
		{[]string{"queues", "cap", "default"}, "queues cap: missing argument"},
		{[]string{"queues", "cap", "default", "lots"}, `cap "lots": must be a whole number`},
		{[]string{"runs", "enqueue", "wf", "--input", "{nope"}, "--input: not valid JSON"},
		{[]string{"runs", "list", "--limit", "many"}, `invalid value "many" for flag -limit`},
		{[]string{"--url", "localhost:8080", "workers"}, `server URL "localhost:8080": must look like http://host:port`},
		{[]string{"help", "nothing"}, `help: unknown command "nothing"`},
	} {
		res := s.cairn(t, tc.args...)
		require.Equal(t, exitUsage, res.code, "cairn %v: %s", tc.args, res.stderr)
		require.Empty(t, res.stdout, "cairn %v", tc.args)
		require.Contains(t, res.stderr, "cairn: "+tc.msg, "cairn %v", tc.args)
		require.Contains(t, res.stderr, "Usage: cairn", "cairn %v", tc.args)
	}
	// A refused command line changed nothing.
	runs, err := s.st.RunListFiltered(context.Background(), &store.RunListParams{Limit: 10})
	require.NoError(t, err)
	require.Empty(t, runs)

	// Help goes to stdout with exit 0.
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		res := s.cairn(t, args...)
		require.Equal(t, exitOK, res.code, "cairn %v", args)
		require.Contains(t, res.stdout, "runs enqueue WORKFLOW")
		require.Contains(t, res.stdout, "Exit codes:")
		require.Empty(t, res.stderr)
	}
	res := s.cairn(t, "runs", "list", "-h")
	require.Equal(t, exitOK, res.code)
	require.Contains(t, res.stdout, "Usage: cairn runs list")
	require.Contains(t, res.stdout, "-status")
	res = s.cairn(t, "help", "queues", "cap")
	require.Equal(t, exitOK, res.code)
	require.Contains(t, res.stdout, "Usage: cairn queues cap QUEUE N|none")
}

func TestAPIAndAuthErrors(t *testing.T) {
	t.Parallel()
	s := setup(t)

	res := s.cairn(t, "runs", "show", "999999")
	require.Equal(t, result{code: exitError, stderr: "cairn: run 999999 not found\n"}, res)

	res = s.cairn(t, "runs", "list", "--status", "exploded")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, `cairn: status "exploded": must be one of`)

	res = s.cairn(t, "runs", "enqueue", "nope")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, "cairn: ")
	require.Contains(t, res.stderr, "nope")

	// Passwords: a wrong one, none without a terminal, none with a
	// terminal (asked once), the read-only one on a write.
	vars := map[string]string{"CAIRN_URL": s.url, "CAIRN_PASSWORD": "wrong"}
	res = s.cairnWith(t, vars, nil, "workers")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, "cairn: wrong password")

	vars = map[string]string{"CAIRN_URL": s.url}
	res = s.cairnWith(t, vars, nil, "workers")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, "set CAIRN_PASSWORD")

	asked := 0
	prompt := func() (string, error) { asked++; return adminPW, nil }
	res = s.cairnWith(t, vars, prompt, "queues", "pause", "default")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Equal(t, 1, asked)
	require.Equal(t, "Queue default paused.\n", res.stdout)

	asked = 0
	res = s.cairnWith(t, vars, func() (string, error) { asked++; return "bad", nil }, "workers")
	require.Equal(t, result{code: exitError, stderr: "cairn: wrong password: the server refused it\n"}, res)
	require.Equal(t, 1, asked)

	vars = map[string]string{"CAIRN_URL": s.url, "CAIRN_PASSWORD": readonlyPW}
	require.Equal(t, exitOK, s.cairnWith(t, vars, nil, "queues", "list").code)
	res = s.cairnWith(t, vars, nil, "queues", "resume", "default")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, "cairn: read-only access")
	q, err := s.st.QueueGet(context.Background(), "default")
	require.NoError(t, err)
	require.True(t, q.Paused, "the refused resume changed nothing")

	// No server there.
	dead := httptest.NewServer(nil)
	dead.Close()
	res = s.cairnWith(t, map[string]string{"CAIRN_URL": dead.URL, "CAIRN_PASSWORD": adminPW}, nil, "workers")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, "cairn: cannot reach "+dead.URL)
}

// lineBuffer collects output written from another goroutine and signals
// each write.
type lineBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{} // capacity 1
}

func newLineBuffer() *lineBuffer { return &lineBuffer{wrote: make(chan struct{}, 1)} }

func (b *lineBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, err := b.buf.Write(p)
	select {
	case b.wrote <- struct{}{}:
	default:
	}
	return n, err
}

func (b *lineBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitLine waits until a complete line holds every part and returns it.
func (b *lineBuffer) waitLine(t *testing.T, parts ...string) string {
	t.Helper()
	deadline := time.NewTimer(waitFor)
	defer deadline.Stop()
	for {
		for _, line := range strings.SplitAfter(b.String(), "\n") {
			if !strings.HasSuffix(line, "\n") {
				continue
			}
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return line
			}
		}
		select {
		case <-b.wrote:
		case <-deadline.C:
			t.Fatalf("no line with %q within %s; got:\n%s", parts, waitFor, b.String())
		}
	}
}

// watchCmd runs `cairn watch args...` and waits for its greeting. stop
// interrupts it and returns the exit code; ended delivers the exit code
// of a watch that ends by itself (read one or the other).
func (s *server) watchCmd(t *testing.T, args ...string) (stdout, stderr *lineBuffer, stop func() int, ended <-chan int) {
	t.Helper()
	stdout, stderr = newLineBuffer(), newLineBuffer()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)       // the exit code
	finished := make(chan struct{}) // closed once run returned
	e := env{getenv: func(k string) string {
		return map[string]string{"CAIRN_URL": s.url, "CAIRN_PASSWORD": adminPW}[k]
	}, stdin: strings.NewReader("")}
	go func() {
		defer close(finished)
		done <- run(ctx, append([]string{"watch"}, args...), e, stdout, stderr)
	}()
	stop = func() int {
		cancel()
		select {
		case code := <-done:
			return code
		case <-time.After(waitFor):
			t.Fatalf("watch did not end within %s of the interrupt", waitFor)
			return -1
		}
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(waitFor):
			t.Errorf("watch did not end within %s of the interrupt", waitFor)
		}
	})
	// The server greets once it is subscribed: later events all arrive.
	stderr.waitLine(t, "watching "+s.url)
	return stdout, stderr, stop, done
}

func TestWatch(t *testing.T) {
	t.Parallel()
	s := setup(t)
	stdout, _, stop, _ := s.watchCmd(t)
	jsonOut, _, stopJSON, _ := s.watchCmd(t, "--json")
	other, _, stopOther, _ := s.watchCmd(t, "--run", "999999")

	run, err := s.eng.Enqueue(context.Background(), "wf", map[string]any{})
	require.NoError(t, err)
	s.waitRun(t, run.ID, "completed")
	b := s.task(t, run.ID, "b")
	runPart := "run " + strconv.FormatInt(run.ID, 10) + " "
	taskPart := "task " + strconv.FormatInt(b.ID, 10) + " "
	stdout.waitLine(t, runPart, taskPart, "(new) → not_started")
	stdout.waitLine(t, runPart, taskPart, "running → completed", "attempt 1")

	line := jsonOut.waitLine(t, `"to":"completed"`, `"task_id":`+strconv.FormatInt(b.ID, 10)+`,`)
	var ev struct {
		At     time.Time `json:"at"`
		TaskID int64     `json:"task_id"`
		RunID  int64     `json:"run_id"`
		From   string    `json:"from"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &ev))
	require.Equal(t, run.ID, ev.RunID)
	require.Equal(t, "running", ev.From)
	require.False(t, ev.At.IsZero())

	require.Equal(t, exitOK, stop(), "an interrupt ends watch with 0")
	require.Equal(t, exitOK, stopJSON())
	require.Equal(t, exitOK, stopOther())
	require.Empty(t, other.String(), "--run keeps only that run's transitions")
}

// TestWatchReconnectsAfterServerRestart: when the server goes away,
// watch says so once, tries again with backoff while it is down, and
// goes on printing transitions once a new server answers.
func TestWatchReconnectsAfterServerRestart(t *testing.T) {
	t.Parallel()
	s := setup(t)
	stdout, stderr, stop, ended := s.watchCmd(t)
	var tries atomic.Int32
	down := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tries.Add(1)
		http.Error(w, "restarting", http.StatusServiceUnavailable)
	}))
	s.front.Store(&down)
	s.stopHub()
	stderr.waitLine(t, "the server closed the connection: server shutting down; reconnecting")
	eventually(t, "three tries while the server is down", func() bool { return tries.Load() >= 3 })
	select {
	case code := <-ended:
		t.Fatalf("watch ended (exit %d) while the server was down", code)
	default:
	}
	require.Equal(t, 1, strings.Count(stderr.String(), "reconnecting"), "said once, not every try: %s", stderr.String())

	h, _ := s.newSite()
	s.front.Store(&h)
	stderr.waitLine(t, "reconnected to "+s.url)
	run, err := s.eng.Enqueue(context.Background(), "wf", map[string]any{})
	require.NoError(t, err)
	s.waitRun(t, run.ID, "completed")
	stdout.waitLine(t, "run "+strconv.FormatInt(run.ID, 10)+" ", "running → completed")
	require.Equal(t, exitOK, stop())
}

func TestWatchNeedsPassword(t *testing.T) {
	t.Parallel()
	s := setup(t)
	res := s.cairnWith(t, map[string]string{"CAIRN_URL": s.url, "CAIRN_PASSWORD": "wrong"}, nil, "watch")
	require.Equal(t, result{code: exitError, stderr: "cairn: wrong password: the server refused it (CAIRN_PASSWORD)\n"}, res)
}

// TestRunsRetryRequeueAndTasksShow: `runs retry` and `runs requeue` act
// on a whole run, `tasks show` shows a task's attempts, error and
// output, and enqueueing an unknown workflow lists the known ones.
func TestRunsRetryRequeueAndTasksShow(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	s.failA.Store(true)
	run, err := s.eng.Enqueue(ctx, "wf", map[string]any{})
	require.NoError(t, err)
	s.waitRun(t, run.ID, "failed")
	a := s.task(t, run.ID, "a")
	id, aID := strconv.FormatInt(run.ID, 10), strconv.FormatInt(a.ID, 10)

	show := s.ok(t, "tasks", "show", aID)
	require.Regexp(t, `Status\s+failed`, show)
	require.Regexp(t, `Attempts\s+1/`, show)
	require.Contains(t, show, "Last error")
	require.Contains(t, show, "a exploded")
	rowOf(t, show, "1") // the attempt's row

	s.failA.Store(false)
	out := s.ok(t, "runs", "retry", id)
	require.Contains(t, out, "Run #"+id+" retried")
	s.waitRun(t, run.ID, "completed")
	show = s.ok(t, "tasks", "show", aID)
	require.Regexp(t, `Status\s+completed`, show)
	require.Regexp(t, `Output\s+\{"a":1\}`, show)
	res := s.cairn(t, "runs", "retry", id)
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, "no failed or cancelled task")
	res = s.cairn(t, "tasks", "show", "999999")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, "cairn: ")

	// An interrupted run: its task a parked as a shutdown would.
	require.NoError(t, s.eng.PauseQueue(ctx, "default"))
	parked, err := s.eng.Enqueue(ctx, "wf", map[string]any{})
	require.NoError(t, err)
	pa := s.task(t, parked.ID, "a")
	_, _, err = s.st.TransitionAll(ctx, store.TransitionParams{From: []string{store.StatusReady},
		Items: []store.TransitionItem{{TaskID: pa.ID, To: store.StatusInterrupted}}})
	require.NoError(t, err)
	s.waitRun(t, parked.ID, "interrupted")
	pid := strconv.FormatInt(parked.ID, 10)
	out = s.ok(t, "runs", "requeue", pid)
	require.Equal(t, "Run #"+pid+" requeued: its interrupted tasks are ready again.\n", out)
	require.Equal(t, store.StatusReady, s.task(t, parked.ID, "a").Status)
	res = s.cairn(t, "runs", "requeue", pid)
	require.Equal(t, exitError, res.code)
	require.Equal(t, "cairn: run "+pid+" has no interrupted task to requeue (or does not exist)\n", res.stderr)
	require.NoError(t, s.eng.ResumeQueue(ctx, "default"))
	s.waitRun(t, parked.ID, "completed")

	res = s.cairn(t, "runs", "enqueue", "nope")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, `unknown workflow "nope"; known workflows: wf`)
}

// TestRunsWait: `cairn runs wait` returns once the run has ended, prints
// it, and its exit code says how it ended; --timeout gives up with 1.
func TestRunsWait(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	soon, err := s.eng.Enqueue(ctx, "wf", map[string]any{}, engine.WithRunAt(time.Now().Add(300*time.Millisecond)))
	require.NoError(t, err)
	out := s.ok(t, "runs", "wait", strconv.FormatInt(soon.ID, 10))
	require.Regexp(t, `Status\s+completed`, out)

	s.failA.Store(true)
	failed, err := s.eng.Enqueue(ctx, "wf", map[string]any{})
	require.NoError(t, err)
	res := s.cairn(t, "runs", "wait", strconv.FormatInt(failed.ID, 10))
	require.Equal(t, exitRunFailed, res.code, res.stderr)
	require.Equal(t, "cairn: run "+strconv.FormatInt(failed.ID, 10)+" failed\n", res.stderr)

	later, err := s.eng.Enqueue(ctx, "wf", map[string]any{}, engine.WithRunAt(time.Now().Add(time.Hour)))
	require.NoError(t, err)
	res = s.cairn(t, "runs", "wait", strconv.FormatInt(later.ID, 10), "--timeout", "300ms")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, "has not ended: gave up after --timeout")
	require.NoError(t, s.eng.CancelRun(ctx, later.ID))
	res = s.cairn(t, "runs", "wait", strconv.FormatInt(later.ID, 10))
	require.Equal(t, exitRunCancelled, res.code, res.stderr)
}

// TestRunsRerun: `cairn runs rerun ID --from TASK [--input JSON]` starts
// a rerun through the API and says which run it started; a missing
// --from is a usage error, a refusal of the server an error naming it.
func TestRunsRerun(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	run, err := s.eng.Enqueue(ctx, "wf", map[string]any{"x": 1})
	require.NoError(t, err)
	s.waitRun(t, run.ID, "completed")
	id := strconv.FormatInt(run.ID, 10)

	out := s.ok(t, "runs", "rerun", id, "--from", "b", "--input", `{"x": 2}`)
	var newID int64
	_, err = fmt.Sscanf(out, "rerun of run "+id+" from task b: run %d of wf\n", &newID)
	require.NoError(t, err, out)
	s.waitRun(t, newID, "completed")
	r, err := s.st.RunGet(ctx, newID)
	require.NoError(t, err)
	require.Equal(t, run.ID, *r.RerunOf)
	require.Equal(t, "b", *r.RerunFrom)
	require.JSONEq(t, `{"x": 2}`, string(r.Input))
	require.Equal(t, 0, s.task(t, newID, "a").Attempt, "a kept its output, not run again")

	res := s.cairn(t, "runs", "rerun", id)
	require.Equal(t, exitUsage, res.code)
	require.Contains(t, res.stderr, "--from")
	res = s.cairn(t, "runs", "rerun", id, "--from", "zzz")
	require.Equal(t, exitError, res.code)
	require.Contains(t, res.stderr, `task "zzz"`)
}
