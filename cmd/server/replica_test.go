package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// replicaDeadline bounds each wait for the standby to catch up.
const replicaDeadline = time.Minute

// TestReadReplica runs the server with a streaming replica as its read
// URL: pages and GET /api/... answer from the replica, writes go to the
// primary, and the page after a form action reads from the primary.
func TestReadReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pair := pgtest.StartPair(t, nil)
	primary, standby := pair.Primary, pair.Standby
	pgLog := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))

	pdb := openPool(t, primary.URL("postgres"))
	rdb := openPool(t, standby.URL("postgres"))
	_, err := pdb.ExecContext(ctx, `CREATE TABLE replica_marker (id int); INSERT INTO replica_marker VALUES (1)`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var inRecovery bool
		var n int
		err := rdb.QueryRowContext(ctx, `SELECT pg_is_in_recovery(), count(*) FROM replica_marker`).Scan(&inRecovery, &n)
		return err == nil && inRecovery && n == 1
	}, replicaDeadline, 20*time.Millisecond, "the standby is not in recovery with the marker row replayed")

	var logs syncBuffer
	s := start(t, config{addr: "127.0.0.1:0", schema: "cairn",
		databaseURL: primary.URL("postgres"), readDatabaseURL: standby.URL("postgres"),
		logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil))})
	require.Contains(t, logs.String(), "read from a replica")
	require.Contains(t, logs.String(), "in_recovery=true")

	// Runs enqueued on the primary, by an engine that does not run them.
	eng, err := engine.New(pdb, engine.Config{Schema: "cairn", Logger: pgLog})
	require.NoError(t, err)
	require.NoError(t, eng.Register(engine.Workflow{Name: "probe", Tasks: []engine.Task{
		{Name: "only", Run: func(context.Context, *engine.TaskHandle) error { return nil }},
	}}))
	enqueue := func() int64 {
		run, err := eng.Enqueue(ctx, "probe", map[string]any{})
		require.NoError(t, err)
		return run.ID
	}
	a, b := enqueue(), enqueue()
	pst, err := store.New(pdb, "cairn")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ids, err := fetchRunIDs(s.url)
		return err == nil && ids[a] != "" && ids[b] != ""
	}, replicaDeadline, 20*time.Millisecond, "the site does not show the runs enqueued on the primary")

	// Stop the replica's replay: from now on it lags behind the primary.
	_, err = rdb.ExecContext(ctx, `SELECT pg_wal_replay_pause()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var state string
		return rdb.QueryRowContext(ctx, `SELECT pg_get_wal_replay_pause_state()`).Scan(&state) == nil && state == "paused"
	}, replicaDeadline, 20*time.Millisecond, "replay did not pause")

	c := enqueue()
	_, err = pst.RunGet(ctx, c)
	require.NoError(t, err, "the primary has the new run")
	require.Empty(t, apiRunIDs(t, s.url)[c], "GET /api/runs read from the primary, not the paused replica")
	code, body := get(t, s.url+"/runs")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, fmt.Sprintf(`data-run-id="%d"`, a))
	require.NotContains(t, body, fmt.Sprintf(`data-run-id="%d"`, c), "/runs read from the primary, not the paused replica")
	// A run the replica lacks is read from the primary rather than a 404.
	code, body = get(t, fmt.Sprintf("%s/api/runs/%d", s.url, c))
	require.Equal(t, http.StatusOK, code, body)

	code, body = get(t, s.url+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "primary: ok")
	require.Contains(t, body, "replica: ok, in recovery, replay paused")

	// A write through the site goes to the primary; the page it redirects
	// to (showing its flash message) reads from the primary too, while
	// the other reads still see the paused replica.
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar, Timeout: 30 * time.Second}
	resp, err := browser.Get(s.url + "/runs")
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	m := regexp.MustCompile(`<meta name="csrf-token" content="([^"]+)"`).FindSubmatch(page)
	require.NotNil(t, m, "the runs page carries a CSRF token")
	resp, err = browser.PostForm(fmt.Sprintf("%s/runs/%d/cancel", s.url, a), url.Values{"csrf_token": {string(m[1])}})
	require.NoError(t, err)
	page, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(page))
	require.Equal(t, fmt.Sprintf("/runs/%d", a), resp.Request.URL.Path, "the action redirects to the run")
	require.Contains(t, string(page), fmt.Sprintf("Run #%d cancelled.", a))
	require.Equal(t, "cancelled", runStatusOnPage(t, string(page)), "the page after the action read from the paused replica")

	run, err := pst.RunGet(ctx, a)
	require.NoError(t, err)
	require.Equal(t, "cancelled", run.Status, "the action did not reach the primary")
	require.NotEqual(t, "cancelled", apiRunIDs(t, s.url)[a], "GET /api/runs read from the primary, not the paused replica")
	code, body = get(t, fmt.Sprintf("%s/runs/%d", s.url, a))
	require.Equal(t, http.StatusOK, code)
	require.NotEqual(t, "cancelled", runStatusOnPage(t, body), "a later page read from the primary, not the paused replica")

	code, body = get(t, s.url+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Regexp(t, `cairn_site_read_requests_total\{pool="replica"\} [1-9]`, body)
	require.Regexp(t, `cairn_site_read_requests_total\{pool="primary"\} [1-9]`, body)

	// Once replay resumes the site catches up.
	_, err = rdb.ExecContext(ctx, `SELECT pg_wal_replay_resume()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ids, err := fetchRunIDs(s.url)
		return err == nil && ids[c] != "" && ids[a] == "cancelled"
	}, replicaDeadline, 20*time.Millisecond, "the site did not catch up once replay resumed")
	code, body = get(t, s.url+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "replay paused")
}

// openPool opens a pool on dsn, closed when the test ends.
func openPool(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// apiRunIDs returns the status of each run GET /api/runs lists, by id.
func apiRunIDs(t *testing.T, base string) map[int64]string {
	t.Helper()
	ids, err := fetchRunIDs(base)
	require.NoError(t, err)
	return ids
}

// fetchRunIDs is apiRunIDs for a polled condition: it returns the error
// instead of failing the test.
func fetchRunIDs(base string) (map[int64]string, error) {
	resp, err := http.Get(base + "/api/runs")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /api/runs: status %d", resp.StatusCode)
	}
	var out struct {
		Runs []struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
		} `json:"runs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("GET /api/runs: %w", err)
	}
	ids := map[int64]string{}
	for _, r := range out.Runs {
		ids[r.ID] = r.Status
	}
	return ids, nil
}

// runStatusOnPage returns the status a run page shows in its header.
func runStatusOnPage(t *testing.T, page string) string {
	t.Helper()
	m := regexp.MustCompile(`data-testid="run-status">\s*<span class="badge st-[a-z_]+">([a-z_]+)</span>`).FindStringSubmatch(page)
	require.NotNil(t, m, "no run status on the page")
	return strings.TrimSpace(m[1])
}
