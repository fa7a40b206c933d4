package engine

import (
	"context"

	"github.com/cairnhq/cairn/engine/internal/maint"
)

// SlotWaiters returns how many executions of queue wait for a slot
// (deferred tasks whose condition holds).
func SlotWaiters(e *Engine, queue string) int {
	q, ok := e.queues[queue]
	if !ok {
		return 0
	}
	return q.Slots.Waiting()
}

// PruneOnce runs one pass of the retention pruner.
func PruneOnce(ctx context.Context, e *Engine) error {
	return maint.NewPruner(maint.PrunerConfig{Store: e.st, Retention: e.cfg.Retention, Clock: e.cfg.Clock, Logger: e.cfg.Logger, Health: e.health}).RunOnce(ctx)
}
