package engine_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cairnhq/cairn/engine"
)

// One report per day, whatever became of it: for 24 hours after the first
// run was created, enqueueing the same key returns that run, also once it
// has completed or failed.
func ExampleWithUniqueFor() {
	enqueueReport := func(ctx context.Context, eng *engine.Engine, day string) error {
		run, err := eng.Enqueue(ctx, "report", map[string]string{"day": day},
			engine.WithKey("report:"+day), engine.WithUniqueFor(24*time.Hour))
		if err != nil {
			return err
		}
		if run.Existing {
			fmt.Printf("report %s is run %d, enqueued before\n", day, run.ID)
		}
		return nil
	}
	_ = enqueueReport
}
