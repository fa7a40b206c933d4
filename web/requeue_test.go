package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/web"
)

// interrupt parks task a of each run as a shutdown past its grace does.
func (e *env) interrupt(t *testing.T, runs ...int64) {
	t.Helper()
	var items []store.TransitionItem
	for _, id := range runs {
		items = append(items, store.TransitionItem{TaskID: e.task(t, id, "a").ID, To: store.StatusInterrupted})
	}
	_, _, err := e.st.TransitionAll(context.Background(), store.TransitionParams{From: []string{store.StatusReady}, Items: items})
	require.NoError(t, err)
	for _, id := range runs {
		e.waitRun(t, id, store.RunInterrupted)
	}
}

// TestInterruptedRunsNeedAttentionAndRequeue: interrupted runs are on
// the overview's attention list with a link to them; a bulk retry leaves
// them alone and says to requeue them; the bulk requeue (API and form)
// sends their interrupted tasks back to ready.
func TestInterruptedRunsNeedAttentionAndRequeue(t *testing.T) {
	t.Parallel()
	e := setup(t, func(ec *engine.Config, _ *web.Config) { ec.NoWorker = true })
	runs := []int64{e.enqueue(t, nil), e.enqueue(t, nil), e.enqueue(t, nil)}
	e.interrupt(t, runs[0], runs[1])
	c := e.loggedIn(t, adminPW)

	item := c.doc("/", http.StatusOK).Find(testid("attention-item") + `[data-kind="interrupted"]`)
	require.Equal(t, 1, item.Length(), "interrupted runs need attention")
	require.Equal(t, "/runs?status=interrupted", item.Find("a").AttrOr("href", ""))
	require.Contains(t, item.Text(), "2 interrupted runs")
	require.Contains(t, item.Text(), "2 tasks parked until an admin requeues or cancels them")
	res, body := c.get("/api/overview")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `"kind": "interrupted"`)

	type answer struct {
		Runs, Tasks, Interrupted int
		Done, Skipped            *int
		Message                  string
	}
	post := func(body string) answer {
		t.Helper()
		res, out := c.postJSON("/api/runs/bulk", body)
		require.Equal(t, http.StatusOK, res.StatusCode, out)
		var a answer
		require.NoError(t, json.Unmarshal([]byte(out), &a))
		return a
	}
	a := post(`{"action":"retry","filter":{"status":"interrupted"},"dry_run":true}`)
	require.Equal(t, 0, a.Runs)
	require.Equal(t, 2, a.Interrupted)
	require.Contains(t, a.Message, "2 runs with interrupted tasks left alone")
	require.Contains(t, a.Message, "requeue")
	a = post(fmt.Sprintf(`{"action":"retry","ids":[%d]}`, runs[0]))
	require.Equal(t, 0, *a.Done)
	require.Contains(t, a.Message, "1 run with interrupted tasks left alone: retry acts on failed and cancelled tasks; requeue interrupted ones")
	require.Equal(t, store.StatusInterrupted, e.task(t, runs[0], "a").Status)

	a = post(`{"action":"requeue","filter":{"status":"interrupted"},"dry_run":true}`)
	require.Equal(t, 2, a.Runs)
	require.Equal(t, 2, a.Tasks)
	require.Nil(t, a.Done)

	// The form asks to confirm a requeue by filter.
	res, body = c.postForm("/runs/bulk", url.Values{"action": {"requeue"}, "status": {"interrupted"}})
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `data-testid="confirm-tasks">2</strong> interrupted tasks`)
	// And requeues the runs ticked on the list.
	res, body = c.postForm("/runs/bulk", url.Values{"action": {"requeue"}, "id": {strconv.FormatInt(runs[0], 10), strconv.FormatInt(runs[2], 10)}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode, body)
	doc := c.doc("/runs", http.StatusOK)
	require.Equal(t, "Requeued 1 run; 1 skipped because no task of theirs was interrupted.", strings.TrimSpace(doc.Find(testid("flash")).Text()))
	require.Equal(t, store.StatusReady, e.task(t, runs[0], "a").Status)
	require.Equal(t, 1, doc.Find(testid("selection-requeue")).Length())

	a = post(fmt.Sprintf(`{"action":"requeue","ids":[%d]}`, runs[1]))
	require.Equal(t, 1, *a.Done)
	require.Equal(t, "Requeued 1 run.", a.Message)
	require.Equal(t, store.StatusReady, e.task(t, runs[1], "a").Status)
	eventually(t, 15*time.Second, "the attention item to go", func() bool {
		return c.doc("/", http.StatusOK).Find(testid("attention-item")+`[data-kind="interrupted"]`).Length() == 0
	})
}
