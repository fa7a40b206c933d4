package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
	"github.com/cairnhq/cairn/web"
)

// setupBare is a site whose process registers no workflow: what it shows
// of workflows is what other processes stored.
func setupBare(t *testing.T) *env {
	t.Helper()
	db := pgtest.New(t)
	logger := testLogger(t)
	eng, err := engine.New(db.SQL, engine.Config{DatabaseURL: db.URL, Logger: logger, PollInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, eng.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = eng.Shutdown(ctx)
	})
	require.Empty(t, eng.Workflows())
	st := newStore(t, db.SQL, "")
	srv, err := web.New(web.Config{
		Logger: logger, AdminPassword: adminPW, ReadonlyPassword: readonlyPW, ListenAddr: "127.0.0.1:0",
		SessionSecret: []byte("0123456789abcdef0123456789abcdef"), Engine: eng, Reads: st,
	})
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
	return &env{db: db, eng: eng, st: st, srv: srv, ts: ts}
}

// storeDef stores a version of a workflow as a registering engine
// does: its definition is an engine.WorkflowDef as JSON.
func storeDef(t *testing.T, e *env, d engine.WorkflowDef, version string, ago time.Duration, compatible ...string) {
	t.Helper()
	def, err := json.Marshal(d)
	require.NoError(t, err)
	_, err = e.db.SQL.Exec(`INSERT INTO cairn.workflow_versions (workflow, version, definition, templates, compatible, registered_at)
		VALUES ($1, $2, $3, '[]', $4, now() - $5 * interval '1 second')`, d.Name, version, def, pq.Array(append([]string{}, compatible...)), ago.Seconds())
	require.NoError(t, err)
}

// billingDef is workflow billing with tasks names in a chain.
func billingDef(names ...string) engine.WorkflowDef {
	d := engine.WorkflowDef{Name: "billing", Queue: "default"}
	for i, n := range names {
		td := engine.TaskDef{Name: n, Deps: []string{}, Queue: "default", MaxAttempts: 5, InitialDelay: time.Second,
			MaxDelay: time.Hour, BackoffFactor: 2, Timeout: time.Minute, Trigger: engine.AllSuccess, MaxRescues: 3, Handle: "billing." + n}
		if i > 0 {
			td.Deps = []string{names[i-1]}
		}
		d.Tasks = append(d.Tasks, td)
	}
	return d
}

// versionsWorld stores billing v1 (a→b) and v2 (a→b→c), a worker serving
// each, and a run of v1 in flight. It returns the run and v1's worker.
func versionsWorld(t *testing.T, e *env) (int64, int64) {
	t.Helper()
	ctx := context.Background()
	storeDef(t, e, billingDef("a", "b"), "v1", time.Hour)
	storeDef(t, e, billingDef("a", "b", "c"), "v2", 0, "v1")
	worker := func(name, version string, handles ...string) int64 {
		id, err := e.st.WorkerRegister(ctx, store.WorkerRegisterParams{Name: name, Queues: map[string]int{"default": 1}, Handles: handles})
		require.NoError(t, err)
		_, err = e.db.SQL.Exec(`UPDATE cairn.workers SET versions = $1 WHERE id = $2`, pq.Array([]string{"billing@" + version}), id)
		require.NoError(t, err)
		return id
	}
	w1 := worker("box-a", "v1", "billing.a", "billing.b")
	worker("box-b", "v2", "billing.a", "billing.b", "billing.c")
	require.NoError(t, e.st.QueueEnsure(ctx, []string{"default"}))
	runs, err := e.st.RunInsertMany(ctx, []store.RunInsertParams{{Workflow: "billing", Input: json.RawMessage(`{}`), Queue: "default",
		Tasks: []store.TaskTemplate{{Idx: 0, Name: "a", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{1}},
			{Idx: 1, Name: "b", MaxAttempts: 3, MaxRescues: 3, Deps: []int{0}, Dependents: []int{}}}}})
	require.NoError(t, err)
	_, err = e.db.SQL.Exec(`UPDATE cairn.run_rows SET version = 'v1' WHERE id = $1`, runs[0].ID)
	require.NoError(t, err)
	_, err = e.db.SQL.Exec(`UPDATE cairn.tasks SET version = 'v1' WHERE run_id = $1`, runs[0].ID)
	require.NoError(t, err)
	return runs[0].ID, w1
}

// finishRun works the run's tasks to completion as worker w.
func finishRun(t *testing.T, e *env, w int64) {
	t.Helper()
	ctx := context.Background()
	for range 2 {
		got, err := e.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Minute})
		require.NoError(t, err)
		require.Len(t, got, 1)
		_, err = e.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
			Items: []store.TransitionItem{{TaskID: got[0].ID, To: store.StatusCompleted, Attempt: got[0].Attempt}}})
		require.NoError(t, err)
	}
}

// A site whose process registers nothing shows the workflows and
// versions workers stored: the newest version's definition, both
// versions while the old one has a run in flight, then the old one as
// retirable once its last run finished.
func TestWorkflowsPageReadsTheDatabase(t *testing.T) {
	t.Parallel()
	e := setupBare(t)
	runID, w1 := versionsWorld(t, e)
	c := e.loggedIn(t, readonlyPW)

	doc := c.doc("/workflows", http.StatusOK)
	wf := doc.Find(testid("workflow") + `[data-workflow="billing"]`)
	require.Equal(t, 1, wf.Length(), "the workflow another process stored is shown")
	require.Equal(t, "v2", strings.TrimSpace(wf.Find(testid("workflow-version")).Text()))
	var tasks []string
	wf.Find(testid("workflow-task")).Each(func(_ int, s *goquery.Selection) { tasks = append(tasks, s.AttrOr("data-task", "")) })
	require.Equal(t, []string{"a", "b", "c"}, tasks, "described by its newest version")
	require.Equal(t, `5 attempts, backoff 1s ×2 up to 1h`, strings.TrimSpace(wf.Find(`[data-task="c"] `+testid("task-retries")).Text()))
	require.Contains(t, wf.Find(`[data-task="c"] `+testid("task-workers")).Text(), "box-b")

	row := func(wf *goquery.Selection, version, id string) string {
		return strings.Join(strings.Fields(wf.Find(testid("workflow-version-row")+`[data-version="`+version+`"] `+testid(id)).Text()), " ")
	}
	var versions []string
	wf.Find(testid("workflow-version-row")).Each(func(_ int, s *goquery.Selection) { versions = append(versions, s.AttrOr("data-version", "")) })
	require.Equal(t, []string{"v2", "v1"}, versions)
	require.Equal(t, "current", row(wf, "v2", "version-state"))
	require.Equal(t, "draining: 1 runs in flight", row(wf, "v1", "version-state"))
	require.Equal(t, "1", row(wf, "v1", "version-pending"))
	require.Equal(t, "0", row(wf, "v2", "version-pending"))
	require.Contains(t, row(wf, "v1", "version-workers"), "box-a")
	require.NotContains(t, row(wf, "v1", "version-workers"), "box-b")

	// The start-a-run form offers it (admin).
	admin := e.loggedIn(t, adminPW)
	runs := admin.doc("/runs", http.StatusOK)
	require.Equal(t, 1, runs.Find(testid("enqueue-form")+` option[value="billing"]`).Length())

	finishRun(t, e, w1)
	e.waitRun(t, runID, "completed")
	doc = c.doc("/workflows", http.StatusOK)
	wf = doc.Find(testid("workflow") + `[data-workflow="billing"]`)
	require.Equal(t, "retirable: last run finished, its workers can go", row(wf, "v1", "version-state"))
	require.Equal(t, "0", row(wf, "v1", "version-pending"))
	require.Equal(t, "current", row(wf, "v2", "version-state"))
}

// GET /api/workflows and /api/workflows/{name} answer from the database
// in a process that registers nothing.
func TestWorkflowsAPIReadsTheDatabase(t *testing.T) {
	t.Parallel()
	e := setupBare(t)
	versionsWorld(t, e)
	c := e.loggedIn(t, readonlyPW)

	type version struct {
		Version string `json:"version"`
		Tasks   []struct {
			Name string   `json:"name"`
			Deps []string `json:"deps"`
		} `json:"tasks"`
		Compatible []string `json:"compatible"`
		Runs       struct {
			Pending  int `json:"pending"`
			InFlight int `json:"in_flight"`
		} `json:"runs"`
		Workers   []string `json:"workers"`
		Newest    bool     `json:"newest"`
		Retirable bool     `json:"retirable"`
	}
	type workflow struct {
		Name    string  `json:"name"`
		Version *string `json:"version"`
		Tasks   []struct {
			Name string `json:"name"`
		} `json:"tasks"`
		Versions []version `json:"versions"`
	}
	check := func(w workflow) {
		t.Helper()
		require.Equal(t, "billing", w.Name)
		require.NotNil(t, w.Version)
		require.Equal(t, "v2", *w.Version)
		require.Len(t, w.Tasks, 3)
		require.Len(t, w.Versions, 2)
		v2, v1 := w.Versions[0], w.Versions[1]
		require.Equal(t, "v2", v2.Version)
		require.True(t, v2.Newest)
		require.Equal(t, []string{"v1"}, v2.Compatible)
		require.Equal(t, "v1", v1.Version)
		require.Len(t, v1.Tasks, 2)
		require.Equal(t, []string{"a"}, v1.Tasks[1].Deps)
		require.Equal(t, 1, v1.Runs.Pending)
		require.Equal(t, 1, v1.Runs.InFlight)
		require.False(t, v1.Retirable)
		require.Len(t, v1.Workers, 1)
		require.Contains(t, v1.Workers[0], "box-a")
	}

	res, body := c.get("/api/workflows")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var list struct {
		Workflows   []string   `json:"workflows"`
		Definitions []workflow `json:"definitions"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Equal(t, []string{"billing"}, list.Workflows)
	check(list.Definitions[0])

	res, body = c.get("/api/workflows/billing")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var one workflow
	require.NoError(t, json.Unmarshal([]byte(body), &one))
	check(one)

	res, body = c.get("/api/workflows/nope")
	require.Equal(t, http.StatusNotFound, res.StatusCode, body)
	require.Contains(t, body, `workflow \"nope\" not found`)
}
