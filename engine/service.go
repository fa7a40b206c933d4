package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/engine/internal/maint"
)

// service is a background loop of the engine (see internal/maint): Start
// returns at once, Stop waits for it to end and is safe twice.
type service interface {
	Start(ctx context.Context) error
	Stop()
}

// services are the engine's services in the groups Engine.Start starts
// (writers, producers, background) and Shutdown stops the other way
// round, with the handlers' grace between producers and background: the
// order the shutdown contract needs is the table "Starting and stopping"
// of engine/internal/README.md.
type services struct {
	writers, producers, background []service
}

// start starts every service, writers first (the completer runs before
// the first claim starts a handler), then producers, then the rest.
func (s *services) start(ctx context.Context) error {
	for _, group := range [][]service{s.writers, s.producers, s.background} {
		for _, svc := range group {
			if err := svc.Start(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// stopAllParallel stops every service of list at once and returns when
// all have stopped.
func stopAllParallel(list []service) {
	var wg sync.WaitGroup
	for _, s := range list {
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop() }()
	}
	wg.Wait()
}

// errLeaseLost is the cause given to a handler whose task the heartbeat
// found no longer held by this worker.
var errLeaseLost = fmt.Errorf("%w: lease lost", ErrTaskLost)

// newHeartbeat returns the worker's heartbeat service (see
// maint.Heartbeat). It first retries a failed write of the worker's
// handles (see routing.Router), and sets the slot gauges after each beat.
func (e *Engine) newHeartbeat() *maint.Heartbeat {
	return maint.NewHeartbeat(maint.HeartbeatConfig{Store: e.st, WorkerID: e.workerID,
		Tasks:    executor.Leases[*execution]{Execs: &e.running, Log: e.log, Lost: errLeaseLost},
		Interval: e.cfg.HeartbeatInterval, Lease: e.cfg.LeaseDuration, Clock: e.cfg.Clock, Logger: e.log, Health: e.health,
		Before: e.router.RetryFailed, OnMoves: countMoves,
		After: func() {
			for name, q := range e.queues {
				slotsTotal.WithLabelValues(name).Set(float64(q.Size))
				slotsInUse.WithLabelValues(name).Set(float64(q.Size - q.Slots.Available()))
			}
		}})
}
