package engine_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairnhq/cairn/engine"
)

// A handler with durable waits: the step runs once whatever happens, the
// sleep and the wait for a signal hold no slot and survive a crash of the
// worker (the next attempt waits only for what is left). Code outside
// steps runs again on every attempt.
func ExampleStep() {
	createUser := func(ctx context.Context, email string) (int64, error) { return 42, nil }
	onboard := func(ctx context.Context, t *engine.TaskHandle) error {
		var in struct{ Email string }
		if err := t.Input(&in); err != nil {
			return engine.Permanent(err)
		}
		userID, err := engine.Step(ctx, t, "create user", func(ctx context.Context) (int64, error) {
			return createUser(ctx, in.Email)
		})
		if err != nil {
			return err
		}
		if err := t.Sleep(ctx, 24*time.Hour); err != nil {
			return err
		}
		approval, err := t.AwaitSignal(ctx, "approved", 7*24*time.Hour)
		if errors.Is(err, engine.ErrWaitTimeout) {
			return engine.Permanent(fmt.Errorf("user %d: not approved within a week", userID))
		} else if err != nil {
			return err
		}
		return t.SetOutput(map[string]any{"user": userID, "approval": approval})
	}
	_ = engine.Workflow{Name: "onboard", Tasks: []engine.Task{{Name: "onboard", Run: onboard}}}
	// Elsewhere, in any process on the same database:
	//	err := eng.SendSignal(ctx, taskID, "approved", map[string]string{"by": "alice"})
	fmt.Println("registered")
	// Output: registered
}
