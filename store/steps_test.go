package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// A checkpoint is fenced by the attempt: once the task was rescued and
// claimed again, by the same worker even, the stale attempt writes
// nothing, the current one does.
func TestCheckpointOfAStaleAttemptWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(1))
	require.NoError(t, err)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 1})
	require.NoError(t, err)
	claim := store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: time.Minute}
	first, err := b.st.TaskClaim(ctx, claim)
	require.NoError(t, err)
	require.Len(t, first, 1)
	moved, err := b.st.Transition(ctx, store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: w,
		Items: []store.TransitionItem{{TaskID: first[0].ID, To: store.StatusReady, Attempt: first[0].Attempt}}})
	require.NoError(t, err)
	require.Len(t, moved, 1)
	second, err := b.st.TaskClaim(ctx, claim)
	require.NoError(t, err)
	require.Len(t, second, 1)
	require.Equal(t, first[0].Attempt+1, second[0].Attempt)

	stale := store.StepHolder{TaskID: first[0].ID, WorkerID: w, Attempt: first[0].Attempt}
	require.ErrorIs(t, b.st.TaskCheckpoint(ctx, stale, json.RawMessage(`{"from":"stale"}`)), store.ErrNotFound)
	_, err = b.st.TaskStepSave(ctx, stale, "s", json.RawMessage(`1`))
	require.ErrorIs(t, err, store.ErrNotFound)
	current := store.StepHolder{TaskID: first[0].ID, WorkerID: w, Attempt: second[0].Attempt}
	require.NoError(t, b.st.TaskCheckpoint(ctx, current, json.RawMessage(`{"from":"current"}`)))
	tk, err := b.st.TaskGet(ctx, first[0].ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"from":"current"}`, string(tk.Checkpoint))

	// Log lines too: the stale attempt's are not stored.
	now := time.Now()
	require.NoError(t, b.st.TaskLogAppend(ctx, []store.TaskLogLine{
		{TaskID: first[0].ID, RunID: first[0].RunID, Attempt: first[0].Attempt, At: now, Level: "INFO", Msg: "stale"},
		{TaskID: first[0].ID, RunID: first[0].RunID, Attempt: second[0].Attempt, At: now, Level: "INFO", Msg: "current"},
	}))
	lines, _, err := b.st.TaskLogRecent(ctx, first[0].ID, 10)
	require.NoError(t, err)
	require.Len(t, lines, 1)
	require.Equal(t, "current", lines[0].Msg)
}

// The step statements probe the task's primary key even when the
// statistics say no task runs (after a bulk enqueue), instead of the
// partial index of running tasks' leases.
func TestStepStatementsUseThePrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	_, err := b.st.RunInsertMany(ctx, single(2000))
	require.NoError(t, err)
	_, err = b.db.SQL.Exec(`ANALYZE ` + pgtest.Schema + `.tasks`)
	require.NoError(t, err)
	for _, name := range []string{"TaskStepLock", "TaskCheckpoint", "TaskStepSaveMany", "TaskCheckpointMany"} {
		q := b.st.Query(name)
		args := []any{int64(1), int64(1), 1}
		switch name {
		case "TaskCheckpoint":
			args = append([]any{`{}`}, args...)
		case "TaskStepSaveMany", "TaskCheckpointMany":
			args = []any{`[{"i": 0, "t": 1, "w": 1, "a": 1, "n": "s", "v": 1}]`}
		}
		tx, err := b.db.SQL.BeginTx(ctx, nil)
		require.NoError(t, err)
		rows, err := tx.Query(`EXPLAIN `+q, args...)
		require.NoError(t, err)
		var plan []string
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			plan = append(plan, line)
		}
		require.NoError(t, rows.Err())
		require.NoError(t, tx.Rollback())
		text := strings.Join(plan, "\n")
		require.Contains(t, text, "tasks_pkey", "%s:\n%s", name, text)
		require.NotContains(t, text, "tasks_lease", "%s:\n%s", name, text)
		require.NotContains(t, text, "Seq Scan on tasks", "%s:\n%s", name, text)
		require.NotContains(t, text, "Seq Scan on task_steps", "%s:\n%s", name, text)
	}
}
