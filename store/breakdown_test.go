package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// TestTaskBreakdownPercentiles seeds tasks with known queue waits and run
// times and checks counts, percentiles (percentile_cont) and buckets, per
// workflow and per queue.
func TestTaskBreakdownPercentiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ids := siteRuns(t, b.st, "one", "x", 5)
	var tasks []int64
	for _, runID := range ids {
		ts, err := b.st.TaskListByRun(ctx, runID)
		require.NoError(t, err)
		tasks = append(tasks, ts[0].ID)
	}
	until := time.Now().UTC().Truncate(time.Second)
	since := until.Add(-time.Hour)
	base := since.Add(7 * time.Minute) // bucket 1 of 5 minutes
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := b.db.SQL.ExecContext(ctx, q, args...)
		require.NoError(t, err)
	}
	// Tasks 0-3: waits 1..4 s, runs 10..40 s; 0-2 complete, 3 fails.
	for i := range 4 {
		wait, run := time.Duration(i+1)*time.Second, time.Duration(10*(i+1))*time.Second
		to := "completed"
		if i == 3 {
			to = "failed"
		}
		exec(`UPDATE cairn.tasks SET status = $2, attempt = 1, available_at = $3, started_at = $4, finished_at = $5 WHERE id = $1`,
			tasks[i], to, base, base.Add(wait), base.Add(wait+run))
		exec(`INSERT INTO cairn.task_events (run_id, task_id, from_status, to_status, attempt, at) VALUES
			($1, $2, 'ready', 'running', 1, $3), ($1, $2, 'running', $4, 1, $5)`,
			ids[i], tasks[i], base.Add(wait), to, base.Add(wait+run))
	}
	// Task 4: finished before the window (not counted), then deferred
	// twice and resumed once in the last 15 minutes.
	exec(`INSERT INTO cairn.task_events (run_id, task_id, from_status, to_status, attempt, at) VALUES
		($1, $2, 'running', 'completed', 1, $3),
		($1, $2, 'running', 'deferred', 1, $4), ($1, $2, 'deferred', 'running', 1, $5), ($1, $2, 'running', 'deferred', 1, $6)`,
		ids[4], tasks[4], since.Add(-time.Minute), until.Add(-10*time.Minute), until.Add(-9*time.Minute), until.Add(-time.Minute))

	rows, err := b.st.TaskBreakdown(ctx, store.BreakdownParams{Since: since, Until: until, Bucket: 5 * time.Minute, DeferSince: until.Add(-15 * time.Minute)})
	require.NoError(t, err)
	byKey := map[string]store.BreakdownRow{}
	for _, r := range rows {
		byKey[r.Kind+"/"+r.Name+"/"+time.Duration(r.Bucket).String()] = r
	}
	for _, kind := range []string{store.BreakdownWorkflow, store.BreakdownQueue} {
		name := "one"
		if kind == store.BreakdownQueue {
			name = "default"
		}
		all, ok := byKey[kind+"/"+name+"/"+time.Duration(-1).String()]
		require.True(t, ok, "whole-window row of %s %s in %+v", kind, name, rows)
		require.Equal(t, int64(3), all.Completed)
		require.Equal(t, int64(1), all.Failed)
		require.Equal(t, int64(4), all.Started)
		require.InDelta(t, 2.5, *all.WaitP50, 1e-6)
		require.InDelta(t, 3.85, *all.WaitP95, 1e-6)
		require.InDelta(t, 25, *all.RunP50, 1e-6)
		require.InDelta(t, 38.5, *all.RunP95, 1e-6)
		require.Equal(t, int64(2), all.DeferIn)
		require.Equal(t, int64(1), all.DeferOut)

		b1, ok := byKey[kind+"/"+name+"/"+time.Duration(1).String()]
		require.True(t, ok, "bucket 1 of %s %s", kind, name)
		require.Equal(t, int64(3), b1.Completed)
		require.Equal(t, int64(1), b1.Failed)
		_, ok = byKey[kind+"/"+name+"/"+time.Duration(0).String()]
		require.False(t, ok, "nothing in bucket 0")
	}

	_, err = b.st.TaskBreakdown(ctx, store.BreakdownParams{Since: until, Until: since, Bucket: time.Minute})
	require.Error(t, err)
}

// TestEventsMessageLogs: log notes ride on the events payload under "l",
// which an events payload without them does not need.
func TestEventsMessageLogs(t *testing.T) {
	t.Parallel()
	p, err := store.EventsMessage{Logs: []store.LogNote{{TaskID: 7, RunID: 3}}}.Encode()
	require.NoError(t, err)
	require.JSONEq(t, `{"e": [], "l": [[7, 3]]}`, p)
	m, err := store.DecodeEvents(p)
	require.NoError(t, err)
	require.Equal(t, []store.LogNote{{TaskID: 7, RunID: 3}}, m.Logs)
	require.Empty(t, m.Transitions)
	m, err = store.DecodeEvents(`{"e": []}`)
	require.NoError(t, err)
	require.Empty(t, m.Logs)
}
