package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// parkedTask waits until a task is deferred in a durable wait of kind.
func (e *env) parkedTask(t *testing.T, taskID int64, kind string) {
	t.Helper()
	eventually(t, 15*time.Second, "task "+strconv.FormatInt(taskID, 10)+" parked in "+kind, func() bool {
		tk, err := e.st.TaskGet(context.Background(), taskID)
		require.NoError(t, err)
		return tk.Status == store.StatusDeferred && tk.WaitKind != nil && *tk.WaitKind == kind
	})
}

// TestTaskPageShowsStepsWaitsAndSignals: a task that journals a step,
// waits for a signal and then sleeps shows each on its page, its
// fragment and its API; the Send signal form wakes it, refuses bad input
// beside the field, and is not offered to the read-only login.
func TestTaskPageShowsStepsWaitsAndSignals(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "durable", Tasks: []engine.Task{{
		Name: "t",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			if _, err := engine.Step(ctx, h, "fetch", func(context.Context) (map[string]int, error) {
				return map[string]int{"x": 1}, nil
			}); err != nil {
				return err
			}
			if _, err := h.AwaitSignal(ctx, "approve", time.Hour); err != nil {
				return err
			}
			return h.Sleep(ctx, time.Hour)
		},
	}}}))
	run, err := e.eng.Enqueue(ctx, "durable", nil)
	require.NoError(t, err)
	task := e.task(t, run.ID, "t")
	page := "/tasks/" + strconv.FormatInt(task.ID, 10)
	form := page + "/signal"
	e.parkedTask(t, task.ID, store.WaitKindSignal)
	admin := e.loggedIn(t, adminPW)
	// A signal of another name stays pending.
	res, body := admin.postJSON("/api"+form, `{"name": "other", "payload": [1, 2, 3]}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)

	for _, path := range []string{page, "/fragments" + page} {
		doc := admin.doc(path, http.StatusOK)
		wait := doc.Find(testid("task-durable-wait"))
		require.Equal(t, "signal", wait.AttrOr("data-kind", ""), path)
		require.Contains(t, wait.Text(), `waiting for signal "approve" (timeout at `, path)
		require.Regexp(t, `UTC \(in (59 min|1 h)\)`, wait.Text(), path)
		steps := doc.Find(testid("step"))
		require.Equal(t, 2, steps.Length(), path)
		// Most recent first: the wait's deadline, then the handler's step.
		require.Equal(t, "cairn:signal#1/wait", steps.Eq(0).AttrOr("data-name", ""))
		require.Contains(t, steps.Eq(0).Find(testid("step-words")).Text(), "wait for a signal until ")
		require.Equal(t, "fetch", strings.TrimSpace(steps.Eq(1).Find(testid("step-name")).Text()))
		require.Equal(t, "8 B", strings.TrimSpace(steps.Eq(1).Find(testid("step-size")).Text()), `{"x": 1}`)
		pending := doc.Find(testid("signal-pending"))
		require.Equal(t, 1, pending.Length(), path)
		require.Equal(t, "other", pending.AttrOr("data-name", ""))
		require.Zero(t, doc.Find(testid("signal-consumed")).Length())
	}
	doc := admin.doc(page, http.StatusOK)
	require.Equal(t, 1, doc.Find(testid("signal-form")).Length(), "admins get the form")

	// Read-only: no form, and a POST is refused.
	ro := e.loggedIn(t, readonlyPW)
	require.Zero(t, ro.doc(page, http.StatusOK).Find(testid("signal-form")).Length())
	res, body = ro.postForm(form, url.Values{"name": {"approve"}})
	require.Equal(t, http.StatusForbidden, res.StatusCode, body)

	// Bad input: 400 with the error beside its field; nothing sent.
	for _, tc := range []struct{ name, payload, field string }{
		{"", "", "name"},
		{"approve", "{not json", "payload"},
		{strings.Repeat("n", 201), "", "name"},
	} {
		res, body := admin.postForm(form, url.Values{"name": {tc.name}, "payload": {tc.payload}})
		require.Equal(t, http.StatusBadRequest, res.StatusCode, body)
		fe := parseDoc(t, body).Find(testid("field-error"))
		require.Equal(t, 1, fe.Length(), body)
		require.Equal(t, tc.field, fe.AttrOr("data-field", ""))
		require.Contains(t, fe.Text(), tc.field+":")
		require.Equal(t, tc.payload, parseDoc(t, body).Find(testid("signal-payload")).Text(), "the values sent are kept")
	}
	sigs, err := e.st.SignalListByTask(ctx, task.ID)
	require.NoError(t, err)
	require.Len(t, sigs, 1, "refused signals store nothing")

	// Success: the result in place, and the task takes it and sleeps on.
	res, body = admin.postForm(form, url.Values{"name": {"approve"}, "payload": {`{"ok": true}`}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	require.Equal(t, page, res.Header.Get("Location"), "back to the task page: a reload sends nothing again")
	require.Equal(t, `Signal "approve" sent to task #`+strconv.FormatInt(task.ID, 10)+".",
		strings.TrimSpace(admin.doc(page, http.StatusOK).Find(testid("flash")).Text()))
	e.parkedTask(t, task.ID, store.WaitKindSleep)

	doc = admin.doc(page, http.StatusOK)
	wait := doc.Find(testid("task-durable-wait"))
	require.Equal(t, "sleep", wait.AttrOr("data-kind", ""))
	require.Contains(t, wait.Text(), "sleeping until ")
	require.Regexp(t, `UTC \(in (59 min|1 h)\)`, wait.Text())
	consumed := doc.Find(testid("signal-consumed"))
	require.Equal(t, 1, consumed.Length())
	require.Equal(t, "approve", consumed.AttrOr("data-name", ""))
	require.Equal(t, "1", strings.TrimSpace(consumed.Find(testid("signal-attempt")).Text()))
	require.Equal(t, 1, doc.Find(testid("signal-pending")).Length(), "other is still pending")
	words := doc.Find(testid("step-words")).Text()
	require.Contains(t, words, `signal "approve" received`)
	require.Contains(t, words, "sleep until ")

	res, body = admin.get("/api" + page)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var api struct {
		DurableWait *struct {
			Kind  string     `json:"kind"`
			Until *time.Time `json:"until"`
			Text  string     `json:"text"`
		} `json:"durable_wait"`
		Steps []struct {
			Name  string `json:"name"`
			Size  int64  `json:"size"`
			Words string `json:"words"`
		} `json:"steps"`
		StepsTotal      int64 `json:"steps_total"`
		SignalsPending  []store.SignalInfo
		SignalsConsumed []store.SignalInfo `json:"signals_consumed"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &api))
	require.NotNil(t, api.DurableWait)
	require.Equal(t, "sleep", api.DurableWait.Kind)
	require.NotNil(t, api.DurableWait.Until)
	require.EqualValues(t, 4, api.StepsTotal)
	require.Len(t, api.Steps, 4)
	require.Equal(t, "fetch", api.Steps[3].Name)
	require.EqualValues(t, 8, api.Steps[3].Size)
	require.Len(t, api.SignalsConsumed, 1)
	require.Equal(t, 1, *api.SignalsConsumed[0].ConsumedAttempt)

	// A finished task: the message in place, nothing stored.
	require.NoError(t, e.eng.CancelTask(ctx, task.ID))
	res, body = admin.postForm(form, url.Values{"name": {"approve"}})
	require.Equal(t, http.StatusConflict, res.StatusCode, body)
	require.NotEmpty(t, strings.TrimSpace(parseDoc(t, body).Find(testid("signal-error")).Text()))
	sigs, err = e.st.SignalListByTask(ctx, task.ID)
	require.NoError(t, err)
	require.Len(t, sigs, 2)
	require.Zero(t, admin.doc(page, http.StatusOK).Find(testid("task-durable-wait")).Length(), "a finished task waits for nothing")
}

// TestTaskPageCountsAwaitedChildRuns: a task waiting for the runs it
// spawned shows how many finished, live.
func TestTaskPageCountsAwaitedChildRuns(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "hold", Tasks: []engine.Task{{
		Name: "h",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			_, err := h.AwaitSignal(ctx, "go", 0)
			return err
		},
	}}}))
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "fan", Tasks: []engine.Task{{
		Name: "p",
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			a, err := h.SpawnRun(ctx, "one", "hold", nil)
			if err != nil {
				return err
			}
			b, err := h.SpawnRun(ctx, "two", "hold", nil)
			if err != nil {
				return err
			}
			_, err = h.AwaitRuns(ctx, a.ID, b.ID)
			return err
		},
	}}}))
	run, err := e.eng.Enqueue(ctx, "fan", nil)
	require.NoError(t, err)
	parent := e.task(t, run.ID, "p")
	e.parkedTask(t, parent.ID, store.WaitKindRuns)
	page := "/tasks/" + strconv.FormatInt(parent.ID, 10)
	c := e.loggedIn(t, readonlyPW)

	doc := c.doc(page, http.StatusOK)
	wait := doc.Find(testid("task-durable-wait"))
	require.Equal(t, "runs", wait.AttrOr("data-kind", ""))
	require.Contains(t, wait.Text(), "waiting for child runs: 0/2 done")
	words := doc.Find(testid("step-words"))
	require.Equal(t, 3, words.Length(), "two spawns and the wait")
	require.Contains(t, words.Text(), "spawned run #")
	require.Contains(t, words.Text(), `("one")`)

	// One child finishes: the count moves.
	children, err := e.st.RunChildList(ctx, run.ID, 10)
	require.NoError(t, err)
	require.Len(t, children, 2)
	require.NoError(t, e.eng.SendSignal(ctx, e.task(t, children[0].ID, "h").ID, "go", nil))
	e.waitRun(t, children[0].ID, store.RunCompleted)
	frag := c.doc("/fragments"+page, http.StatusOK)
	require.Contains(t, frag.Find(testid("task-durable-wait")).Text(), "waiting for child runs: 1/2 done")
}

// TestTaskPageCapsSteps: a task with more steps than the page lists
// shows the most recent ones and how many more there are.
func TestTaskPageCapsSteps(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	runID := e.enqueue(t, nil)
	e.waitRun(t, runID, store.RunCompleted)
	a := e.task(t, runID, "a")
	// As engine.Step journals them (the engine tests cover journaling).
	_, err := e.db.SQL.ExecContext(context.Background(), `INSERT INTO cairn.task_steps (task_id, name, result, attempt, at)
		SELECT $1, 'step ' || g, '{}', 1, now() + g * interval '1 ms' FROM generate_series(1, 205) g`, a.ID)
	require.NoError(t, err)
	doc := e.loggedIn(t, readonlyPW).doc("/tasks/"+strconv.FormatInt(a.ID, 10), http.StatusOK)
	steps := doc.Find(testid("step"))
	require.Equal(t, 200, steps.Length())
	require.Equal(t, "step 205", steps.First().AttrOr("data-name", ""))
	require.Equal(t, "5 more", strings.TrimSpace(doc.Find(testid("steps-more")).Text()))
	require.Zero(t, doc.Find(testid("task-durable-wait")).Length())
}
