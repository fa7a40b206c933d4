package web_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// A site whose process registers nothing offers, in its "Start a run"
// form, a workflow another process registered, and the run it starts is
// worked by that process: an admin can start (or schedule) any workflow
// a live worker registered.
func TestStartFormStartsAWorkflowOfAnotherProcess(t *testing.T) {
	t.Parallel()
	e := setupBare(t)
	worker, err := engine.New(e.db.SQL, engine.Config{DatabaseURL: e.db.URL, Logger: testLogger(t), PollInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	ran := make(chan string, 1)
	require.NoError(t, worker.Register(engine.Workflow{Name: "remote", Tasks: []engine.Task{{Name: "only",
		Run: func(_ context.Context, h *engine.TaskHandle) error {
			var in struct {
				Via string `json:"via"`
			}
			if err := h.Input(&in); err != nil {
				return err
			}
			ran <- in.Via
			return nil
		}}}}))
	require.NoError(t, worker.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = worker.Shutdown(ctx)
	})

	c := e.loggedIn(t, adminPW)
	doc := c.doc("/runs", http.StatusOK)
	var offered []string
	doc.Find(`[data-testid="enqueue-form"] select[name="workflow"] option`).Each(func(_ int, s *goquery.Selection) {
		offered = append(offered, s.AttrOr("value", ""))
	})
	require.Contains(t, offered, "remote", "the form offers the other process's workflow")
	scheduled := []string{}
	c.doc("/schedules/new", http.StatusOK).Find(`[data-testid="schedule-workflow"] option`).Each(func(_ int, s *goquery.Selection) {
		scheduled = append(scheduled, s.AttrOr("value", ""))
	})
	require.Contains(t, scheduled, "remote", "so does the schedule form")

	res, _ := c.postForm("/runs", url.Values{"workflow": {"remote"}, "input": {`{"via": "form"}`}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	loc := res.Header.Get("Location")
	require.True(t, strings.HasPrefix(loc, "/runs/"), loc)
	id, err := strconv.ParseInt(strings.TrimPrefix(loc, "/runs/"), 10, 64)
	require.NoError(t, err)
	select {
	case via := <-ran:
		require.Equal(t, "form", via)
	case <-time.After(15 * time.Second):
		t.Fatal("the worker did not run the started run within 15 s")
	}
	run := e.waitRun(t, id, store.RunCompleted)
	require.NotNil(t, run.Version, "the run records the version it was started with")
}
