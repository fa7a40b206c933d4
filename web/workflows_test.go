package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// setupWorkflows adds workflow "opts" (x with every option set, y after
// x with AllDone) to the test engine, and a second live worker that
// registers only wf.a. It returns that worker's id.
func setupWorkflows(t *testing.T, e *env) int64 {
	t.Helper()
	noop := func(context.Context, *engine.TaskHandle) error { return nil }
	prio := 3
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "opts", Tasks: []engine.Task{
		{Name: "x", Run: noop, Retry: engine.RetryPolicy{MaxAttempts: 5, RetryOn: []string{"timeout"}}, Timeout: time.Minute,
			Queue: "slow", Priority: &prio, RequeueOnInterrupt: true,
			Concurrency: &engine.Concurrency{Key: "customer", Max: 2},
			RateLimit:   &engine.RateLimit{Group: "api", Key: "customer", Limit: 10, Per: time.Minute}},
		{Name: "y", Deps: []string{"x"}, Run: noop, Trigger: engine.AllDone},
	}}))
	id, err := e.st.WorkerRegister(context.Background(), store.WorkerRegisterParams{
		Name: "other-box", Queues: map[string]int{"default": 1}, Handles: []string{"wf.a"}})
	require.NoError(t, err)
	return id
}

func TestWorkflowsPage(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	setupWorkflows(t, e)
	c := e.loggedIn(t, readonlyPW)

	doc := c.doc("/workflows", http.StatusOK)
	require.Equal(t, "page", doc.Find(testid("nav-workflows")).AttrOr("aria-current", ""))
	var names []string
	doc.Find(testid("workflow")).Each(func(_ int, s *goquery.Selection) { names = append(names, s.AttrOr("data-workflow", "")) })
	require.Equal(t, []string{"opts", "wf"}, names)

	wf := doc.Find(testid("workflow") + `[data-workflow="wf"]`)
	require.Equal(t, "/runs?workflow=wf", wf.Find(testid("workflow-runs")).AttrOr("href", ""))
	require.Equal(t, 2, wf.Find(testid("dag-node")).Length(), "the DAG shows both tasks")
	require.Equal(t, 1, wf.Find(testid("dag-edge")).Length(), "and the dependency a -> b")
	workers := func(wf *goquery.Selection, task string) string {
		return strings.TrimSpace(wf.Find(testid("workflow-task") + `[data-task="` + task + `"] ` + testid("task-workers")).Text())
	}
	require.Contains(t, workers(wf, "a"), "other-box", "the second worker registers wf.a")
	require.NotContains(t, workers(wf, "b"), "other-box", "but not wf.b")
	require.Contains(t, wf.Find(testid("workflow-workers")).Text(), "other-box")

	opts := doc.Find(testid("workflow") + `[data-workflow="opts"]`)
	x := opts.Find(testid("workflow-task") + `[data-task="x"]`)
	cell := func(sel *goquery.Selection, id string) string { return strings.TrimSpace(sel.Find(testid(id)).Text()) }
	require.Equal(t, `5 attempts, backoff 1s ×2 up to 1h ±10%; only errors containing "timeout"`, cell(x, "task-retries"))
	require.Equal(t, "1m", cell(x, "task-timeout"))
	require.Equal(t, "requeue", cell(x, "task-interrupt"))
	require.Equal(t, "2 at once per customer · group opts.x", cell(x, "task-concurrency"))
	require.Equal(t, "10 per 1m per customer · group api", cell(x, "task-rate"))
	require.Contains(t, x.Text(), "slow")
	y := opts.Find(testid("workflow-task") + `[data-task="y"]`)
	require.Equal(t, "all_done", cell(y, "task-trigger"))
	require.Equal(t, "5m", cell(y, "task-timeout"), "the engine's default timeout")
	require.Equal(t, "park", cell(y, "task-interrupt"))
	require.Equal(t, "–", cell(y, "task-concurrency"))
	require.Equal(t, 1, opts.Find(testid("dag-edge")).Length())

	// The live part alone.
	res, body := c.get("/fragments/workflows")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.NotContains(t, body, "<html")
	require.Contains(t, body, `data-workflow="opts"`)
}

func TestWorkflowsAPI(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	other := setupWorkflows(t, e)
	c := e.loggedIn(t, readonlyPW)

	res, body := c.get("/api/workflows")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	type worker struct {
		ID   int64  `json:"id"`
		Name string `json:"name"`
	}
	var out struct {
		Workflows []struct {
			Name    string   `json:"name"`
			Queue   string   `json:"queue"`
			RunsURL string   `json:"runs_url"`
			Workers []worker `json:"workers"`
			Tasks   []struct {
				Name        string   `json:"name"`
				Deps        []string `json:"deps"`
				Queue       string   `json:"queue"`
				Priority    *int     `json:"priority"`
				MaxAttempts int      `json:"max_attempts"`
				Timeout     string   `json:"timeout"`
				Trigger     struct {
					Shorthand string `json:"shorthand"`
				} `json:"trigger"`
				RequeueOnInterrupt bool `json:"requeue_on_interrupt"`
				Concurrency        *struct {
					Group string `json:"group"`
					Key   string `json:"key"`
					Max   int    `json:"max"`
				} `json:"concurrency"`
				RateLimit *struct {
					Group string `json:"group"`
					Limit int    `json:"limit"`
					Per   string `json:"per"`
				} `json:"rate_limit"`
				Workers []worker `json:"workers"`
			} `json:"tasks"`
		} `json:"definitions"`
		Names []string `json:"workflows"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &out))
	require.Len(t, out.Workflows, 2)
	require.Equal(t, []string{"opts", "wf"}, out.Names, "workflows stays the list of names")
	opts, wf := out.Workflows[0], out.Workflows[1]
	require.Equal(t, "opts", opts.Name)
	require.Equal(t, "default", opts.Queue)
	require.Equal(t, "/api/runs?workflow=opts", opts.RunsURL)
	x, y := opts.Tasks[0], opts.Tasks[1]
	require.Equal(t, "slow", x.Queue)
	require.Equal(t, 3, *x.Priority)
	require.Equal(t, 5, x.MaxAttempts)
	require.Equal(t, "1m0s", x.Timeout)
	require.True(t, x.RequeueOnInterrupt)
	require.NotNil(t, x.Concurrency)
	require.Equal(t, "opts.x", x.Concurrency.Group, "the default group")
	require.Equal(t, "customer", x.Concurrency.Key)
	require.Equal(t, 2, x.Concurrency.Max)
	require.Equal(t, "api", x.RateLimit.Group)
	require.Equal(t, "1m0s", x.RateLimit.Per)
	require.Equal(t, "all_success", x.Trigger.Shorthand)
	require.Equal(t, []string{"x"}, y.Deps)
	require.Nil(t, y.Priority)
	require.Equal(t, 3, y.MaxAttempts)
	require.Equal(t, "all_done", y.Trigger.Shorthand)
	require.Nil(t, y.Concurrency)

	require.Equal(t, "wf", wf.Name)
	ids := func(ws []worker) []int64 {
		out := []int64{}
		for _, w := range ws {
			out = append(out, w.ID)
		}
		return out
	}
	self := e.eng.WorkerID()
	require.ElementsMatch(t, []int64{self, other}, ids(wf.Tasks[0].Workers), "wf.a: both workers")
	require.Equal(t, []int64{self}, ids(wf.Tasks[1].Workers), "wf.b: the engine only")
	require.ElementsMatch(t, []int64{self, other}, ids(wf.Workers))
	require.Equal(t, []int64{self}, ids(opts.Workers))
}
