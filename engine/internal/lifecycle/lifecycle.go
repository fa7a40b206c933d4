// Package lifecycle starts and stops the engine: its one start and one
// stop (Life), and its services as lists, in groups, in the order the
// shutdown contract needs (Groups; the table "Starting and stopping" of
// engine/internal/README.md says why).
package lifecycle

import (
	"context"
	"errors"
	"sync"
)

// Service is one of the engine's services: Start returns at once, Stop
// waits for it to end and is safe twice or before Start.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

// Groups are the engine's services in the groups Start starts: writers
// first (the completer runs before the first claim starts a handler),
// then producers, then the background services. Shutdown stops them the
// other way round, with the handlers' grace between producers and
// background.
type Groups struct {
	Writers, Producers, Background []Service
}

// Start starts every service, group by group, and stops at the first
// error.
func (g *Groups) Start(ctx context.Context) error {
	for _, group := range [][]Service{g.Writers, g.Producers, g.Background} {
		for _, s := range group {
			if err := s.Start(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// StopInTurn stops the services of list one after the other.
func StopInTurn(list []Service) {
	for _, s := range list {
		s.Stop()
	}
}

// StopTogether stops every service of list at once and returns when all
// have stopped.
func StopTogether(list []Service) {
	var wg sync.WaitGroup
	for _, s := range list {
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop() }()
	}
	wg.Wait()
}

// ErrStarted refuses a second start.
var ErrStarted = errors.New("start: already started")

// Life is the engine's one start and one stop, and the context of its
// loops (which outlives Start's context and ends at the stop).
type Life struct {
	mu                sync.Mutex
	started, stopping bool
	stopped           chan struct{}
	unwatch           func() bool // stops the watch of Start's context

	loops  context.Context
	cancel context.CancelFunc
}

// New returns a life not started.
func New() *Life { return &Life{stopped: make(chan struct{})} }

// Start runs start once, under the lock that orders it with the stop,
// with the loops' context (made from ctx's values, not its end). Once
// start succeeded, the end of ctx calls stop, as the engine's Shutdown
// does (stop must be safe then: it runs in a goroutine of its own).
func (l *Life) Start(ctx context.Context, start func(loops context.Context) error, stop func()) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return ErrStarted
	}
	l.loops, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := start(l.loops); err != nil {
		return err
	}
	l.started = true
	l.unwatch = context.AfterFunc(ctx, stop)
	return nil
}

// BeginStop says whether the caller is the one to stop: false when the
// engine never started (there is nothing to stop), or when another
// caller stops it, after waiting for that stop to end (or for ctx, whose
// error it then returns). The caller that gets true calls EndStop when
// done.
func (l *Life) BeginStop(ctx context.Context) (bool, error) {
	l.mu.Lock()
	if !l.started {
		l.mu.Unlock()
		return false, nil
	}
	if l.stopping {
		l.mu.Unlock()
		select {
		case <-l.stopped:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	l.stopping = true
	l.mu.Unlock()
	return true, nil
}

// EndStop marks the stop done: later and waiting BeginStop calls return.
func (l *Life) EndStop() {
	l.unwatch()
	close(l.stopped)
}

// Stopping reports whether the stop has begun.
func (l *Life) Stopping() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stopping
}

// Loops is the loops' context; nil before Start.
func (l *Life) Loops() context.Context { return l.loops }

// CancelLoops ends the loops' context (at the stop, once the handlers
// are done).
func (l *Life) CancelLoops() {
	if l.cancel != nil {
		l.cancel()
	}
}
