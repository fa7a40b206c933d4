package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
)

// A handler's fencing token names its task and attempt, and grows with
// each attempt of the task.
func TestFencingTokenNamesTheAttempt(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	tokens := make(chan string, 2)
	ids := make(chan int64, 2)
	require.NoError(t, e.eng.Register(engine.Workflow{Name: "w", Tasks: []engine.Task{{Name: "x",
		Retry: engine.RetryPolicy{MaxAttempts: 2, InitialDelay: time.Millisecond},
		Run: func(ctx context.Context, h *engine.TaskHandle) error {
			tokens <- h.FencingToken()
			ids <- h.TaskID()
			if h.Attempt() == 1 {
				return errors.New("again")
			}
			return nil
		}}}}))
	start(t, e.eng)
	_, err := e.eng.Enqueue(context.Background(), "w", nil)
	require.NoError(t, err)
	first, id := <-tokens, <-ids
	require.Equal(t, fmt.Sprintf("%d:1", id), first)
	require.Equal(t, fmt.Sprintf("%d:2", id), <-tokens)
}
