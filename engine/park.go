package engine

import (
	"fmt"
	"time"

	"github.com/cairnhq/cairn/engine/internal/parker"
	"github.com/cairnhq/cairn/engine/internal/telemetry"
	"github.com/cairnhq/cairn/store"
)

// Parking: DeferUntil's and the durable waits' writes, batched, and the
// parked wait on one shared timer, are the parker's (see package parker).

// errEngineStopped answers a deferral submitted after the engine's writers
// stopped (a handler that ignored its cancelled context).
var errEngineStopped = fmt.Errorf("%w: engine stopped", ErrTaskLost)

// newParker returns the engine's park and resume writers.
func newParker(e *Engine) *parker.Parker[*execution] {
	return parker.New(parker.Config[*execution]{Store: e.st, WorkerID: e.workerID.Load(), Lease: e.cfg.LeaseDuration,
		Max: e.cfg.CompletionBatch, Queues: e.queues, Keyed: e.keyed.Load, Held: e.queues.Held,
		Clock: e.cfg.Clock, Health: e.health, Wakeups: e.wakeups, Start: e.startExecution,
		Settled: (*execution).settled, Lost: ErrTaskLost, Stopped: errEngineStopped,
		OnWrite: func(start time.Time, op string, exs []*execution, claimed []store.Claimed, err error) {
			e.tr.deferBatch(start, op, exs, claimed, err)
		},
		OnCommit: func(moved []store.Moved, claimed int) {
			telemetry.CountMoves(moved)
			telemetry.CountTransition(store.StatusReady, store.StatusRunning, claimed)
		}})
}
