package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// With one slot and a backlog, the write that finishes a task claims the
// next one in its own transaction: the claim event carries the same
// transaction time as the completion event before it, and the worker
// never runs two tasks at once.
func TestCompletionWriteClaimsTheNextTask(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) { c.Queues = map[string]engine.QueueConfig{"default": {Slots: 1}} })
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "noop", Tasks: []engine.Task{{Name: "a",
		Run: func(context.Context, *engine.TaskHandle) error { return nil }}}}))
	ctx := context.Background()
	const n = 6
	var runs []int64
	for range n {
		run, err := e.eng.Enqueue(ctx, "noop", nil)
		require.NoError(t, err)
		runs = append(runs, run.ID)
	}
	start(t, e.eng)
	completedAt := map[time.Time]bool{}
	var claims []store.Event
	for _, id := range runs {
		require.Equal(t, store.RunCompleted, waitRun(t, e.st, id, 20*time.Second).Status)
		task := taskByName(t, e.st, id, "a")
		events, err := e.st.EventListByTask(ctx, task.ID)
		require.NoError(t, err)
		for _, ev := range events {
			switch ev.To {
			case store.StatusCompleted:
				completedAt[ev.At] = true
			case store.StatusRunning:
				claims = append(claims, ev)
			}
		}
	}
	require.Len(t, claims, n)
	along := 0
	for _, c := range claims {
		if completedAt[c.At] {
			along++
		}
	}
	// The first claim is the claim loop's; each later one rides on the
	// completion of the task before it.
	require.Equal(t, n-1, along, "claims made in a completion's transaction")
	// These tasks have no dependents and the batches are small: each
	// write was one statement (finish and claim, one commit).
	require.GreaterOrEqual(t, engine.OneStatementWrites(e.eng), int64(n-1))
}

// A claim loop claims when something announces work, once per
// announcement: a NOTIFY of new tasks wakes one of the queue's claimers,
// not all of them, and a completion write frees its slots without waking
// any when the queue was found empty since the last announcement (by its
// own claim along, or by the claim before it, in which case it does not
// claim along at all). Nothing is left waiting for the poll, which never
// comes here: every task enqueued one by one, or from several goroutines
// at once, still runs.
func TestClaimLoopsClaimOncePerAnnouncement(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *engine.Config) {
		c.Queues = map[string]engine.QueueConfig{"default": {Slots: 64}} // two claimers
		c.PollInterval = time.Hour
	})
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "noop", Tasks: []engine.Task{{Name: "a",
		Run: func(context.Context, *engine.TaskHandle) error { return nil }}}}))
	ctx := context.Background()
	start(t, e.eng)
	eventually(t, 10*time.Second, "the claimers' first claims", func() bool { return engine.ClaimStatements(e.eng, "default") >= 2 })
	before, along := engine.ClaimStatements(e.eng, "default"), engine.ClaimingWrites(e.eng)
	const n = 20
	for range n {
		run, err := e.eng.Enqueue(ctx, "noop", nil)
		require.NoError(t, err)
		require.Equal(t, store.RunCompleted, waitRun(t, e.st, run.ID, 20*time.Second).Status)
	}
	// Waking both claimers per NOTIFY, and again per completion, made
	// about four claims a task.
	claims := engine.ClaimStatements(e.eng, "default") - before
	t.Logf("%d claim statements for %d tasks", claims, n)
	require.LessOrEqual(t, claims, int64(n+n/2), "claim statements for %d tasks enqueued one by one", n)
	// Each task's claim found the queue empty after it: its completion
	// had nothing to claim along (it claimed along for every one before).
	require.LessOrEqual(t, engine.ClaimingWrites(e.eng)-along, int64(n/10), "completion writes that claimed along")

	const writers, each = 4, 25
	errs := make(chan error, writers)
	var ids [writers][each]int64
	for w := range writers {
		go func() {
			for i := range each {
				run, err := e.eng.Enqueue(ctx, "noop", nil)
				if err != nil {
					errs <- err
					return
				}
				ids[w][i] = run.ID
			}
			errs <- nil
		}()
	}
	for range writers {
		require.NoError(t, <-errs)
	}
	for w := range writers {
		for _, id := range ids[w] {
			require.Equal(t, store.RunCompleted, waitRun(t, e.st, id, 20*time.Second).Status)
		}
	}
}

// A keyed task's completion write claims its key's next task in the same
// statement: the key's room is counted without the task the statement
// finishes, so a key at its limit of one hands its place straight on,
// and never runs two at once.
func TestKeyedCompletionWriteHandsTheKeysPlaceOn(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	wf := engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a",
		Run:         func(context.Context, *engine.TaskHandle) error { return nil },
		Concurrency: &engine.Concurrency{Key: "customer", Max: 1}}}}
	eng := keyedEngines(t, db, 1, 1, wf)[0] // one slot: no claim loop claims meanwhile
	const n = 6
	params := make([]engine.EnqueueParams, n)
	for i := range params {
		params[i] = engine.EnqueueParams{Workflow: "w", Input: map[string]any{"customer": "acme"}}
	}
	ctx := context.Background()
	_, err := eng.EnqueueMany(ctx, params)
	require.NoError(t, err)
	start(t, eng)
	waitCompleted(t, db, n, 30*time.Second)
	var along int
	require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM cairn.task_events c
		WHERE c.from_status = 'ready' AND c.to_status = 'running'
		AND EXISTS (SELECT 1 FROM cairn.task_events f WHERE f.to_status = 'completed' AND f.at = c.at)`).Scan(&along))
	require.Equal(t, n-1, along, "claims made in the statement of the completion before them")
	require.GreaterOrEqual(t, engine.OneStatementWrites(eng), int64(n-1), "each completion write was one statement")
	peaks := runningReplay(t, db)
	require.Len(t, peaks, 1)
	for key, p := range peaks {
		require.Equal(t, 1, p, "key %q: at most one running at once, replayed from task_events", key)
	}
}
