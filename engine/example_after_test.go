package engine_test

import (
	"context"

	"github.com/cairnhq/cairn/engine"
)

// Publish once both builds have finished: with AllDone whatever their
// outcome; notify only when the Linux build failed. The runs' root tasks
// wait, without a slot, until the builds finish.
func ExampleWithAfter() {
	afterBuilds := func(ctx context.Context, eng *engine.Engine) error {
		linux, err := eng.Enqueue(ctx, "build", map[string]string{"os": "linux"})
		if err != nil {
			return err
		}
		mac, err := eng.Enqueue(ctx, "build", map[string]string{"os": "darwin"})
		if err != nil {
			return err
		}
		if _, err := eng.Enqueue(ctx, "publish", nil,
			engine.WithAfter(linux.ID, mac.ID), engine.WithAfterRule(engine.AllDone)); err != nil {
			return err
		}
		_, err = eng.Enqueue(ctx, "notify", nil,
			engine.WithAfter(linux.ID), engine.WithAfterRule(engine.All(engine.RunFailed(linux.ID))))
		return err
	}
	_ = afterBuilds
}
