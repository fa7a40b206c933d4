package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

func TestTaskAndQueuesShowWhyReadyTasksWait(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := context.Background()
	// flow.t runs one at a time per customer; its handler holds its place
	// until the test ends.
	started, release := make(chan struct{}, 4), make(chan struct{})
	t.Cleanup(func() { close(release) })
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "flow", Tasks: []engine.Task{{
		Name:        "t",
		Concurrency: &engine.Concurrency{Group: "stripe", Key: "customer", Max: 1},
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		},
	}}}))
	enqueue := func() int64 {
		run, err := e.eng.Enqueue(ctx, "flow", map[string]string{"customer": "cust_42"})
		require.NoError(t, err)
		return e.task(t, run.ID, "t").ID
	}
	first := enqueue()
	<-started
	second := enqueue()
	c := e.loggedIn(t, readonlyPW)

	// The second waits for the first: the key is full.
	doc := c.doc("/tasks/"+strconv.FormatInt(second, 10), http.StatusOK)
	waiting := doc.Find(testid("task-waiting"))
	require.Equal(t, 1, waiting.Length())
	require.Equal(t, "concurrency_full", waiting.AttrOr("data-reason", ""))
	require.Equal(t, "concurrency full: stripe · cust_42, 1/1 running", strings.TrimSpace(waiting.Text()))
	require.Equal(t, "stripe · cust_42", strings.TrimSpace(doc.Find(testid("task-conc-key")).Text()))
	require.Zero(t, doc.Find(testid("task-rate-key")).Length(), "no rate key, no line")
	frag := c.doc("/fragments/tasks/"+strconv.FormatInt(second, 10), http.StatusOK)
	require.Equal(t, 1, frag.Find(testid("task-waiting")).Length(), "the live fragment shows it too")

	res, body := c.get("/api/tasks/" + strconv.FormatInt(second, 10))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var api struct {
		Flow struct {
			Concurrency *struct {
				Group    string `json:"group"`
				KeyValue string `json:"key_value"`
			} `json:"concurrency"`
			Rate *struct{} `json:"rate"`
		} `json:"flow"`
		Wait *store.TaskWait `json:"wait"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &api), body)
	require.NotNil(t, api.Flow.Concurrency, body)
	require.Equal(t, "stripe", api.Flow.Concurrency.Group)
	require.Equal(t, "cust_42", api.Flow.Concurrency.KeyValue)
	require.Nil(t, api.Flow.Rate)
	require.NotNil(t, api.Wait, body)
	require.Equal(t, store.WaitConcurrencyFull, api.Wait.Reason)
	require.Equal(t, "stripe", api.Wait.Group)
	require.Equal(t, "cust_42", api.Wait.KeyValue)
	require.Equal(t, int64(1), api.Wait.Running)
	require.Equal(t, 1, api.Wait.Limit)

	// The running one has its key and no wait.
	doc = c.doc("/tasks/"+strconv.FormatInt(first, 10), http.StatusOK)
	require.Zero(t, doc.Find(testid("task-waiting")).Length())
	require.Equal(t, "stripe · cust_42", strings.TrimSpace(doc.Find(testid("task-conc-key")).Text()))
	_, body = c.get("/api/tasks/" + strconv.FormatInt(first, 10))
	require.Contains(t, body, `"wait": null`)

	// The queues page and its API name the key that holds work back.
	res, body = c.get("/api/queues")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	var qs struct {
		Queues []struct {
			Name      string           `json:"name"`
			FlowHolds []store.FlowHold `json:"flow_holds"`
			Total     int64            `json:"flow_holds_total"`
		} `json:"queues"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &qs), body)
	require.Len(t, qs.Queues, 1, body)
	require.Equal(t, int64(1), qs.Queues[0].Total)
	require.Len(t, qs.Queues[0].FlowHolds, 1, body)
	h := qs.Queues[0].FlowHolds[0]
	require.Equal(t, "concurrency", h.Kind)
	require.Equal(t, "stripe", h.Group)
	require.Equal(t, "cust_42", h.KeyValue)
	require.Equal(t, int64(1), h.Ready)
	require.Equal(t, "stripe · cust_42: 1/1 running, 1 ready", h.Detail)

	for _, path := range []string{"/queues", "/fragments/queues"} {
		row := c.doc(path, http.StatusOK).Find(testid("queue-flow-hold"))
		require.Equal(t, 1, row.Length(), path)
		require.Equal(t, "default", row.AttrOr("data-queue", ""))
		require.Equal(t, "stripe · cust_42", row.AttrOr("data-key", ""))
		require.Equal(t, "stripe · cust_42: 1/1 running, 1 ready", strings.TrimSpace(row.Text()))
	}

	// A paused queue comes first.
	require.NoError(t, e.eng.PauseQueue(ctx, "default"))
	doc = c.doc("/tasks/"+strconv.FormatInt(second, 10), http.StatusOK)
	waiting = doc.Find(testid("task-waiting"))
	require.Equal(t, "queue_paused", waiting.AttrOr("data-reason", ""))
	require.Equal(t, "queue default is paused", strings.TrimSpace(waiting.Text()))
}

func TestQueuesListNoFlowHoldsAsEmpty(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	c := e.loggedIn(t, readonlyPW)
	res, body := c.get("/api/queues")
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	require.Contains(t, body, `"flow_holds": []`)
	require.Contains(t, body, `"flow_holds_total": 0`)
	require.Zero(t, c.doc("/queues", http.StatusOK).Find(testid("queue-flow-hold")).Length())
}
