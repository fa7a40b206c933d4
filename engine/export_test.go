package engine

import (
	"context"
	"time"

	"github.com/cairnhq/cairn/engine/internal/producer"
	"github.com/cairnhq/cairn/store"
)

// ConfigOf exposes an engine's effective config to tests.
func ConfigOf(e *Engine) Config { return e.cfg }

// FailedTries returns how many database calls of the engine's loop called
// name ("claim:<queue>", "completer", "heartbeat", "rescuer", "pruner",
// "counts", "scheduler") have failed, and with name "" those of every loop.
func FailedTries(e *Engine, name string) int64 { return e.health.FailedTries(name) }

// DeferWrites returns how many statements moved tasks running -> deferred
// (the parking writer), deferred -> running (the resume writer), and how
// many completion writes handed their slots to waiting deferred tasks
// (moving them back, or finding them lost, in the same transaction).
func DeferWrites(e *Engine) (park, resume, handoff int64) {
	park, resume = e.parker.Writes()
	return park, resume, e.completer.HandoffWrites()
}

// OneStatementWrites returns how many completion writes finished their
// batch and claimed the next in one statement (TaskFinishAndClaimOne).
func OneStatementWrites(e *Engine) int64 { return e.completer.OneStatementWrites() }

// ClaimingWrites returns how many completion writes claimed along.
func ClaimingWrites(e *Engine) int64 { return e.completer.ClaimingWrites() }

// ClaimStatements returns how many claims queue's claim loops have made.
func ClaimStatements(e *Engine, queue string) int64 { return e.queues[queue].Claims.Load() }

// ParkedWakeups returns how many parked tasks wait on the shared interval
// timer.
func ParkedWakeups(e *Engine) int { return e.wakeups.Len() }

// ClaimedOnPark returns how many tasks park writes claimed for the slots
// they freed.
func ClaimedOnPark(e *Engine) int64 { return e.parker.ClaimedOnPark() }

// ClaimFloorOf returns where the engine's next unkeyed claim of queue
// starts (the zero ClaimFloor: at the start).
func ClaimFloorOf(e *Engine, queue string) store.ClaimFloor { return e.queues[queue].Floor.Get() }

// KeyedFloorOf returns where the engine's next keyed claim of queue
// starts (zero: at the start).
func KeyedFloorOf(e *Engine, queue string) time.Time { return e.queues[queue].KeyedFloor.Get() }

// ReadKeyedFloor runs one read of the engine's keyed floor refresh of
// queue with the margin given: from the start when full, else from the
// floor on.
func ReadKeyedFloor(ctx context.Context, e *Engine, queue string, full bool, margin time.Duration) error {
	return producer.ReadKeyedFloor(ctx, e.st, e.workerID.Load(), e.queues[queue], full, margin)
}

// SetKeyedFloor sets where the engine's next keyed claim of queue starts.
func SetKeyedFloor(e *Engine, queue string, at time.Time) {
	q := e.queues[queue]
	q.KeyedFloor.Move(q.KeyedFloor.Get(), at)
}

// ListeningRunOnce runs the engine's event listener registration once
// (see maint.Listening, run by notify.Hub).
func ListeningRunOnce(ctx context.Context, e *Engine) error { return e.hub.RunOnce(ctx) }

// QuietEnqueues counts the enqueues announced after their commit (see
// notify.Waker).
func QuietEnqueues(e *Engine) int64 { return e.waker.Quiet() }

// ApartWrites returns how many completion batches the database refused
// and the completer wrote item by item.
func ApartWrites(e *Engine) int64 { return e.completer.ApartWrites() }
