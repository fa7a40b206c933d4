package web_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
)

// TestTaskLogLive: what a handler logs shows on its task page while it
// still runs (fragment and JSON API), each new line is announced on the
// websocket, and a line is cut at 2 KiB.
func TestTaskLogLive(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	step := make(chan struct{})
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "talker", Tasks: []engine.Task{
		{Name: "talk", Run: func(ctx context.Context, h *engine.TaskHandle) error {
			h.Logger().Info("first line", slog.Int("n", 1))
			select {
			case <-step:
			case <-ctx.Done():
				return ctx.Err()
			}
			h.Logger().Warn("second line " + strings.Repeat("x", 5000))
			select {
			case <-step:
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}},
	}}))
	c := e.loggedIn(t, adminPW)

	u, _ := url.Parse(e.ts.URL)
	header := http.Header{"Origin": {e.ts.URL}}
	for _, ck := range c.hc.Jar.Cookies(u) {
		header.Add("Cookie", ck.Name+"="+ck.Value)
	}
	conn, _, err := websocket.DefaultDialer.Dial("ws://"+u.Host+"/ws", header)
	require.NoError(t, err)
	defer conn.Close()
	type msg struct {
		T    string  `json:"t"`
		Logs []int64 `json:"logs"`
	}
	// waitLogNote reads messages until one says task id has new lines.
	waitLogNote := func(id int64) {
		t.Helper()
		for {
			require.NoError(t, conn.SetReadDeadline(time.Now().Add(15*time.Second)))
			var m msg
			require.NoError(t, conn.ReadJSON(&m), "waiting for a log note of task %d", id)
			if slices.Contains(m.Logs, id) {
				return
			}
		}
	}
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(15*time.Second)))
	var hello msg
	require.NoError(t, conn.ReadJSON(&hello))
	require.Equal(t, "hello", hello.T)

	run, err := e.eng.Enqueue(context.Background(), "talker", nil)
	require.NoError(t, err)
	task := e.task(t, run.ID, "talk")
	id := strconv.FormatInt(task.ID, 10)

	waitLogNote(task.ID)
	frag := c.doc("/fragments/tasks/"+id+"/log", http.StatusOK)
	lines := frag.Find(testid("task-log-line"))
	require.Equal(t, 1, lines.Length(), "the first line is shown while the handler is blocked")
	require.Equal(t, "first line", lines.Find(testid("task-log-msg")).Text())
	require.Contains(t, lines.Text(), "n=1")
	require.Equal(t, "running", e.task(t, run.ID, "talk").Status, "still running")

	// The full page carries the live log part, following this task.
	page := c.doc("/tasks/"+id, http.StatusOK)
	live := page.Find(testid("task-log-live"))
	require.Equal(t, 1, live.Length())
	require.Equal(t, id, live.AttrOr("data-refresh-log", ""))
	require.Equal(t, 1, live.Find(testid("task-log-line")).Length())

	step <- struct{}{}
	waitLogNote(task.ID)
	frag = c.doc("/fragments/tasks/"+id+"/log", http.StatusOK)
	msgs := frag.Find(testid("task-log-msg")).Map(func(_ int, s *goquery.Selection) string { return s.Text() })
	require.Len(t, msgs, 2)
	require.Equal(t, "first line", msgs[0])
	require.True(t, strings.HasPrefix(msgs[1], "second line xxx"))
	require.LessOrEqual(t, len(msgs[1]), 2048, "a line is cut at 2 KiB")
	require.True(t, strings.HasSuffix(msgs[1], "…"))

	res, body := c.get("/api/tasks/" + id + "/log")
	require.Equal(t, http.StatusOK, res.StatusCode)
	var api struct {
		Lines []struct {
			Attempt int               `json:"attempt"`
			Level   string            `json:"level"`
			Msg     string            `json:"msg"`
			Attrs   map[string]string `json:"attrs"`
		} `json:"lines"`
		Cut bool `json:"cut"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &api))
	require.Len(t, api.Lines, 2)
	require.Equal(t, "INFO", api.Lines[0].Level)
	require.Equal(t, map[string]string{"n": "1"}, api.Lines[0].Attrs)
	require.Equal(t, "WARN", api.Lines[1].Level)
	require.Equal(t, 1, api.Lines[1].Attempt)
	require.False(t, api.Cut)

	step <- struct{}{}
	e.waitRun(t, run.ID, "completed")

	// Unknown and malformed task ids are refused.
	res, _ = c.get("/fragments/tasks/999999/log")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	res, _ = c.get("/api/tasks/999999/log")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	res, _ = c.get("/api/tasks/x/log")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
}
