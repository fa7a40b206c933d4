package e2e

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/e2e/browser"
	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
	"github.com/cairnhq/cairn/web"
)

// TestSiteLiveTaskLog opens a task page in Chromium while its handler
// runs, blocked on a channel the test controls, and sees each line the
// handler logs appear on the open page, without a reload. Engine and site
// run in this process (the handler must be the test's), against a real
// PostgreSQL.
func TestSiteLiveTaskLog(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	checkTruthAtEnd(t, db.SQL)
	logger := slog.New(slog.DiscardHandler)
	eng, err := engine.New(db.SQL, engine.Config{DatabaseURL: db.URL, Logger: logger, PollInterval: 200 * time.Millisecond})
	require.NoError(t, err)
	step := make(chan struct{})
	require.NoError(t, eng.Register(engine.Workflow{Name: "talker", Tasks: []engine.Task{
		{Name: "talk", Run: func(ctx context.Context, h *engine.TaskHandle) error {
			for i := 1; i <= 3; i++ {
				h.Logger().Info("line " + strconv.Itoa(i))
				select {
				case <-step:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}},
	}}))
	require.NoError(t, eng.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = eng.Shutdown(ctx)
	})
	st, err := store.New(db.SQL, engine.DefaultSchema)
	require.NoError(t, err)
	srv, err := web.New(web.Config{Engine: eng, Reads: st, Logger: logger, AdminPassword: siteAdminPassword,
		ListenAddr: "127.0.0.1:0", SessionSecret: []byte("0123456789abcdef0123456789abcdef")})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	hubDone := make(chan error, 1)
	go func() { hubDone <- srv.Run(ctx) }()
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() { cancel(); <-hubDone; ts.Close() })

	s := &site{t: t, url: ts.URL, ctx: browser.NewContext(t)}
	s.login(siteAdminPassword)
	run, err := eng.Enqueue(context.Background(), "talker", nil)
	require.NoError(t, err)
	tasks, err := st.TaskListByRun(context.Background(), run.ID)
	require.NoError(t, err)
	taskID := strconv.FormatInt(tasks[0].ID, 10)

	lines := func() []string {
		return evalAs[[]string](s, `Array.from(document.querySelectorAll('[data-testid=task-log-msg]')).map(e => e.textContent.trim())`)
	}
	s.navigate("/tasks/" + taskID)
	s.waitLive()
	s.eval(`window.__cairnMarker = 1`) // gone if the page reloads
	state := func() string { return strings.Join(lines(), ", ") }
	s.poll("line 1 on the open page", siteTaskWait, func() bool { return equalLines(lines(), "line 1") }, state)
	for i := 2; i <= 3; i++ {
		step <- struct{}{}
		want := []string{}
		for j := 1; j <= i; j++ {
			want = append(want, "line "+strconv.Itoa(j))
		}
		s.poll("line "+strconv.Itoa(i)+" appearing live", siteTaskWait, func() bool { return equalLines(lines(), want...) }, state)
	}
	require.Equal(t, 1, evalAs[int](s, `window.__cairnMarker || 0`), "the lines came without a reload")
	step <- struct{}{}
	s.pollText(`[data-testid=task-status]`, "completed", siteTaskWait)
}

// equalLines reports whether got is exactly want.
func equalLines(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
