package engine

import (
	"context"
	"sync"

	"github.com/cairnhq/cairn/engine/internal/cron"
)

// SchedulerRunOnce runs one tick of the scheduler service: take or renew
// the leader lease, then fire due schedules if this engine leads.
func (e *Engine) SchedulerRunOnce(ctx context.Context) error { return e.testScheduler().RunOnce(ctx) }

// SchedulerFireDueAsLeader fires due schedules as if this engine held the
// lease, whoever holds it: two engines doing so are two leaders.
func (e *Engine) SchedulerFireDueAsLeader(ctx context.Context) error {
	return e.testScheduler().FireDue(ctx, e.cfg.Clock())
}

// SchedulerStop releases the leader lease as Shutdown does.
func (e *Engine) SchedulerStop(ctx context.Context) error { return e.testScheduler().Release(ctx) }

// SchedulerHolder returns this engine's identity in the leases table.
func (e *Engine) SchedulerHolder() string { return e.testScheduler().Holder() }

// testSchedulerMu orders the making of testScheduler's schedulers.
var testSchedulerMu sync.Mutex

// testScheduler returns the engine's scheduler, making one for engines
// that tests drive without Start.
func (e *Engine) testScheduler() *cron.Scheduler {
	testSchedulerMu.Lock()
	defer testSchedulerMu.Unlock()
	if e.scheduler == nil {
		e.scheduler = newScheduler(e)
	}
	return e.scheduler
}
