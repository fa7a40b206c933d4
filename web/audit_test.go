package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/web"
)

// recorder is a slog handler that keeps every record's attributes by
// message, for tests that check what was logged.
type recorder struct {
	mu    *sync.Mutex
	lines *[]logLine
	attrs []slog.Attr
}

type logLine struct {
	msg   string
	attrs map[string]string
}

func newRecorder() *recorder { return &recorder{mu: new(sync.Mutex), lines: new([]logLine)} }

func (h *recorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *recorder) Handle(_ context.Context, r slog.Record) error {
	l := logLine{msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		l.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { l.attrs[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	*h.lines = append(*h.lines, l)
	h.mu.Unlock()
	return nil
}

func (h *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return &c
}

func (h *recorder) WithGroup(string) slog.Handler { return h }

// find returns the attributes of the records with message msg whose
// attributes include want.
func (h *recorder) find(msg string, want map[string]string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
next:
	for _, l := range *h.lines {
		if l.msg != msg {
			continue
		}
		for k, v := range want {
			if l.attrs[k] != v {
				continue next
			}
		}
		out = append(out, l.attrs)
	}
	return out
}

// eventActor returns the actor recorded on the last event of a task that
// moved it to status to.
func (e *env) eventActor(t testing.TB, taskID int64, to string) engine.Actor {
	t.Helper()
	events, err := e.st.EventListByTask(context.Background(), taskID)
	require.NoError(t, err)
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].To != to {
			continue
		}
		var d struct {
			Actor engine.Actor `json:"actor"`
		}
		require.NoError(t, json.Unmarshal(events[i].Detail, &d), "detail %s", events[i].Detail)
		return d.Actor
	}
	t.Fatalf("task %d has no event to %s", taskID, to)
	return engine.Actor{}
}

func TestAdminActionsLeaveAnAuditTrail(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	e := setup(t, func(ec *engine.Config, wc *web.Config) {
		ec.Logger = slog.New(rec)
		wc.Logger = ec.Logger
	})
	e.failA.Store(true)
	runID := e.enqueue(t, nil)
	e.waitRun(t, runID, store.RunFailed)
	a := e.task(t, runID, "a")

	// An API client with HTTP Basic credentials: its user name is the actor.
	req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/api/tasks/%d/retry", e.ts.URL, a.ID), nil)
	require.NoError(t, err)
	req.SetBasicAuth("ops-bob", adminPW)
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	actor := e.eventActor(t, a.ID, store.StatusReady)
	require.Equal(t, "ops-bob", actor.Name)
	require.Equal(t, "admin", actor.Role)
	require.True(t, strings.HasPrefix(actor.Addr, "127.0.0.1:"), "addr %q", actor.Addr)
	lines := rec.find("admin action", map[string]string{"action": "retry_task", "task": fmt.Sprint(a.ID), "actor": "ops-bob"})
	require.Len(t, lines, 1)
	require.Equal(t, "admin", lines[0]["role"])
	require.Equal(t, actor.Addr, lines[0]["addr"])

	// A site login: the session's role is the actor.
	e.waitRun(t, runID, store.RunFailed)
	c := e.loggedIn(t, adminPW)
	res, _ = c.postForm(fmt.Sprintf("/tasks/%d/cancel", e.task(t, runID, "b").ID), nil)
	require.Equal(t, http.StatusConflict, res.StatusCode, "b was skipped: nothing to cancel")
	res, _ = c.postForm(fmt.Sprintf("/runs/%d/pause", runID), nil)
	require.Equal(t, http.StatusConflict, res.StatusCode, "the run failed: nothing to pause")
	res, _ = c.postForm("/queues/default/pause", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = c.postForm("/queues/default/resume", nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	res, _ = c.postForm(fmt.Sprintf("/tasks/%d/retry", a.ID), nil)
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	actor = e.eventActor(t, a.ID, store.StatusReady)
	require.Equal(t, engine.Actor{Name: "admin", Role: "admin", Addr: actor.Addr}, actor)
	require.True(t, strings.HasPrefix(actor.Addr, "127.0.0.1:"), "addr %q", actor.Addr)
	for _, action := range []string{"pause_queue", "resume_queue", "retry_task"} {
		// Not by the retry's addr: the client may have opened a new
		// connection (another port) between requests.
		lines = rec.find("admin action", map[string]string{"action": action, "actor": "admin", "role": "admin"})
		require.Len(t, lines, 1, action)
		require.True(t, strings.HasPrefix(fmt.Sprint(lines[0]["addr"]), "127.0.0.1:"), "%s addr %v", action, lines[0]["addr"])
	}
	// The timeline says who asked.
	doc := c.doc(fmt.Sprintf("/runs/%d", runID), http.StatusOK)
	require.Contains(t, doc.Text(), "task retried by admin from "+actor.Addr)

	// Enqueue from the site: the creation events name the actor.
	res, _ = c.postForm("/runs", url.Values{"workflow": {"wf"}, "input": {`{}`}})
	require.Equal(t, http.StatusSeeOther, res.StatusCode)
	var newRun int64
	_, err = fmt.Sscanf(res.Header.Get("Location"), "/runs/%d", &newRun)
	require.NoError(t, err)
	require.Equal(t, "admin", e.eventActor(t, e.task(t, newRun, "a").ID, store.StatusReady).Name)
	require.Len(t, rec.find("admin action", map[string]string{"action": "enqueue", "run": fmt.Sprint(newRun), "actor": "admin"}), 1)
}

func TestLoopbackActorIsLocal(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	e := setup(t, func(ec *engine.Config, wc *web.Config) {
		wc.AdminPassword, wc.ReadonlyPassword = "", ""
		ec.Logger = slog.New(rec)
	})
	req, err := http.NewRequest(http.MethodPost, e.ts.URL+"/api/queues/default/pause", strings.NewReader(""))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	lines := rec.find("admin action", map[string]string{"action": "pause_queue", "queue": "default", "actor": "local", "role": "admin"})
	require.Len(t, lines, 1)
	require.True(t, strings.HasPrefix(lines[0]["addr"], "127.0.0.1:"), "addr %q", lines[0]["addr"])
}
