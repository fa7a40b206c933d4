package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// TestEnqueueAPIAfter: POST /api/runs with "after" (and "after_rule")
// makes the run wait for those runs; the run page says so; bad ids and
// rules get a 400 naming the field, and write nothing.
func TestEnqueueAPIAfter(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, adminPW)
	ctx := context.Background()
	// Held back: it stays pending until cancelled.
	dep, err := e.eng.Enqueue(ctx, "wf", nil, engine.WithRunAt(time.Now().Add(time.Hour)))
	require.NoError(t, err)

	post := func(body string, status int) (int64, string) {
		t.Helper()
		res, out := c.postJSON("/api/runs", body)
		require.Equal(t, status, res.StatusCode, out)
		var run struct {
			ID int64 `json:"id"`
		}
		_ = json.Unmarshal([]byte(out), &run)
		return run.ID, out
	}
	plain, _ := post(fmt.Sprintf(`{"workflow":"wf","after":[%d]}`, dep.ID), http.StatusCreated)
	done, _ := post(fmt.Sprintf(`{"workflow":"wf","after":[%d],"after_rule":{"shorthand":"all_done"}}`, dep.ID), http.StatusCreated)
	failed, _ := post(fmt.Sprintf(`{"workflow":"wf","after":[%d],"after_rule":{"mode":"all","conditions":[{"kind":"run_failed","run":%d}]}}`,
		dep.ID, dep.ID), http.StatusCreated)
	require.Equal(t, store.StatusNotStarted, e.task(t, plain, "a").Status)

	doc := c.doc("/runs/"+strconv.FormatInt(plain, 10), http.StatusOK)
	after := doc.Find(`[data-testid="run-after"]`)
	require.Equal(t, 1, after.Length())
	require.Contains(t, strings.Join(strings.Fields(after.Text()), " "), fmt.Sprintf("runs #%d", dep.ID))
	require.Contains(t, doc.Find(`.kv dt`).Text(), "Waits for")

	var before int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM `+e.st.Schema()+`.runs`).Scan(&before))
	for body, want := range map[string]string{
		`{"workflow":"wf","after":[987654]}`:                                                    "#987654",
		`{"workflow":"wf","after":[0]}`:                                                         "after",
		`{"workflow":"wf","after":["x"]}`:                                                       "after",
		`{"workflow":"wf","after_rule":{"shorthand":"all_done"}}`:                               "after_rule",
		fmt.Sprintf(`{"workflow":"wf","after":[%d],"after_rule":{"shorthand":"nope"}}`, dep.ID): "after_rule",
		fmt.Sprintf(`{"workflow":"wf","after":[%d],"after_rule":{"mode":"all","conditions":[{"kind":"run_succeeded","run":%d}]}}`,
			dep.ID, dep.ID+100): "after_rule",
	} {
		_, out := post(body, http.StatusBadRequest)
		require.Contains(t, out, want, body)
	}
	var after2 int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM `+e.st.Schema()+`.runs`).Scan(&after2))
	require.Equal(t, before, after2, "a refused enqueue writes nothing")

	require.NoError(t, e.eng.CancelRun(ctx, dep.ID))
	e.waitRun(t, plain, store.RunCompleted)
	require.Equal(t, store.StatusSkipped, e.task(t, plain, "a").Status, "all_success: the awaited run was cancelled")
	e.waitRun(t, done, store.RunCompleted)
	require.Equal(t, store.StatusCompleted, e.task(t, done, "a").Status)
	e.waitRun(t, failed, store.RunCompleted)
	require.Equal(t, store.StatusCompleted, e.task(t, failed, "a").Status, "run_failed holds for a cancelled run")

	doc = c.doc("/runs/"+strconv.FormatInt(plain, 10), http.StatusOK)
	require.Contains(t, doc.Find(`.kv dt`).Text(), "Waited for")
	require.Contains(t, doc.Find(`[data-testid="run-after"]`).Text(), "cancelled")

	res, out := c.get("/api/runs/" + strconv.FormatInt(plain, 10))
	require.Equal(t, http.StatusOK, res.StatusCode, out)
	var got struct {
		After []store.RunDep `json:"after"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	require.Equal(t, []store.RunDep{{AfterRunID: dep.ID, Status: store.RunCancelled, Finished: true}}, got.After)
}
