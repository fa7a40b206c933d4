package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/store"
)

// A completion the database refuses (here a trigger raising for one task
// moving to completed) is not retried forever: the batch is written item
// by item, the other tasks of the batch complete, the refused task ends
// failed with the database's error, and the engine goes on completing
// other work.
func TestRefusedCompletionFailsItsTaskAndTheBatchIsWritten(t *testing.T) {
	t.Parallel()
	const n = 4
	e := setup(t, func(c *engine.Config) { c.Queues = map[string]engine.QueueConfig{"default": {Slots: n}} })
	var mu sync.Mutex
	started := 0
	all := make(chan struct{})
	first := true
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "a",
		Run: func(ctx context.Context, _ *engine.TaskHandle) error {
			mu.Lock()
			wait := first
			if wait {
				started++
				if started == n {
					close(all)
					first = false
				}
			}
			mu.Unlock()
			if wait { // the first n finish together: one batch
				select {
				case <-all:
				case <-ctx.Done():
				}
			}
			return nil
		}}}}))
	ctx := context.Background()
	var runs []int64
	for range n {
		run, err := e.eng.Enqueue(ctx, "w", nil)
		require.NoError(t, err)
		runs = append(runs, run.ID)
	}
	poisoned := taskByName(t, e.st, runs[1], "a").ID
	_, err := e.db.SQL.Exec(fmt.Sprintf(`
CREATE FUNCTION cairn.test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'test refuses task %%', NEW.id USING ERRCODE = 'check_violation'; END $$;
CREATE TRIGGER test_refuse BEFORE UPDATE ON cairn.tasks FOR EACH ROW
WHEN (NEW.id = %d AND NEW.status = 'completed') EXECUTE FUNCTION cairn.test_refuse();`, poisoned))
	require.NoError(t, err)
	start(t, e.eng)
	for i, id := range runs {
		run := waitRun(t, e.st, id, 20*time.Second)
		if i == 1 {
			require.Equal(t, store.RunFailed, run.Status)
			task := taskByName(t, e.st, id, "a")
			require.Equal(t, store.StatusFailed, task.Status)
			require.NotNil(t, task.LastError)
			require.Contains(t, *task.LastError, "test refuses task")
			continue
		}
		require.Equal(t, store.RunCompleted, run.Status)
	}
	require.Equal(t, int64(1), engine.ApartWrites(e.eng), "the refused batch is set apart once")
	require.Zero(t, engine.FailedTries(e.eng, "completer"), "a refused write is not retried as an outage")
	// The engine keeps completing work.
	more, err := e.eng.Enqueue(ctx, "w", nil)
	require.NoError(t, err)
	require.Equal(t, store.RunCompleted, waitRun(t, e.st, more.ID, 20*time.Second).Status)
}
