package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

func TestQueuesShowReadyTasksNoWorkerCanRun(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	// etl.load is registered by no engine: its tasks wait in default,
	// whose only worker runs wf.
	ps := make([]store.RunInsertParams, 3)
	for i := range ps {
		ps[i] = store.RunInsertParams{Workflow: "etl", Input: json.RawMessage(`{}`), Queue: "default",
			Tasks: []store.TaskTemplate{{Idx: 0, Name: "load", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}
	}
	_, err := e.st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	// A run of wf, enqueued after them, completes: the worker passed them by.
	e.waitRun(t, e.enqueue(t, map[string]int{}), store.RunCompleted)
	c := e.loggedIn(t, readonlyPW)

	res, body := c.get("/api/queues")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var got struct {
		Queues []struct {
			Name       string `json:"name"`
			Ready      int64  `json:"ready"`
			Unroutable []struct {
				Workflow string `json:"workflow"`
				Task     string `json:"task"`
				Ready    int64  `json:"ready"`
			} `json:"unroutable"`
		} `json:"queues"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &got), body)
	require.Len(t, got.Queues, 1, body)
	require.Equal(t, int64(3), got.Queues[0].Ready)
	require.Len(t, got.Queues[0].Unroutable, 1, body)
	u := got.Queues[0].Unroutable[0]
	require.Equal(t, "etl", u.Workflow)
	require.Equal(t, "load", u.Task)
	require.Equal(t, int64(3), u.Ready)

	doc := c.doc("/queues", http.StatusOK)
	warn := doc.Find(testid("queue-unroutable"))
	require.Equal(t, 1, warn.Length())
	require.Equal(t, "default", warn.AttrOr("data-queue", ""))
	require.Equal(t, "etl.load", warn.AttrOr("data-task", ""))
	require.Contains(t, strings.Join(strings.Fields(warn.Text()), " "), "no live worker registers etl.load — 3 ready")
	doc = c.doc("/fragments/queues", http.StatusOK)
	require.Equal(t, 1, doc.Find(testid("queue-unroutable")).Length(), "the live fragment shows it too")

	// The tasks are untouched: ready, no attempt spent.
	var n int
	require.NoError(t, e.db.SQL.QueryRow(`SELECT count(*) FROM cairn.tasks WHERE workflow = 'etl' AND status = 'ready' AND attempt = 0`).Scan(&n))
	require.Equal(t, 3, n)

	// With nothing unroutable, the list is empty, not null.
	_, err = e.db.SQL.Exec(`DELETE FROM cairn.tasks WHERE workflow = 'etl'`)
	require.NoError(t, err)
	res, body = c.get("/api/queues")
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `"unroutable": []`)
	require.Zero(t, c.doc("/queues", http.StatusOK).Find(testid("queue-unroutable")).Length())
}
