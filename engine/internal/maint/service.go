// Package maint holds the engine's periodic services: the heartbeat
// (the worker's leases, lost and stray tasks), the rescuer (tasks of dead
// workers), the pruner (old finished runs), the partitioner (the daily
// partitions of task_events, made ahead and dropped past the retention),
// the summarizer (the BRIN ranges of the open history partitions), the
// count folder (the task counts the overview reads), the listening
// registration (event_listeners) and the horizon watch (snapshots that
// hold back vacuum, and the VACUUM after them), and Service, the one
// lifecycle they and the scheduler share. Each service is built over a
// small store interface of its own, a logger and the engine's database
// health tracker, and has a RunOnce that tests call directly.
package maint

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
)

// Service runs a function every interval until stopped. A failed run is
// retried after a backoff (see backoff.Health) instead of the interval.
// Start returns at once; Stop is safe twice or before Start.
type Service struct {
	name   string
	every  time.Duration
	next   func() time.Duration // nil: every
	once   func(context.Context) error
	health *backoff.Health

	mu       sync.Mutex
	started  bool
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// NewService returns a service called name that runs once every interval.
// Its failures are reported to health under its name.
func NewService(name string, every time.Duration, health *backoff.Health, once func(context.Context) error) *Service {
	return &Service{name: name, every: every, once: once, health: health}
}

// Pace makes the service wait next() after each successful run instead
// of its interval, for a service that looks more often while it waits
// for something. Call it before Start.
func (s *Service) Pace(next func() time.Duration) { s.next = next }

// Name returns the service's name, which is also its loop's name in the
// health tracker.
func (s *Service) Name() string { return s.name }

// Start runs the service's loop until ctx is done or Stop is called, and
// returns at once. A service starts once.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return fmt.Errorf("start %s: %w", s.name, errStarted)
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.loop(ctx)
	}()
	return nil
}

var errStarted = errors.New("already started")

func (s *Service) loop(ctx context.Context) {
	t := time.NewTicker(s.every)
	defer t.Stop()
	health := s.health.Loop(s.name)
	bo := backoff.New(rand.Float64)
	failed := false
	for {
		err := s.once(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			failed = true
			health.Fail(ctx, fmt.Errorf("%s: %w", s.name, err))
			if !s.health.Wait(ctx, nil, bo.Next()) {
				return
			}
			continue
		}
		health.OK(ctx)
		switch {
		case s.next != nil:
			t.Reset(s.next())
		case failed:
			t.Reset(s.every) // drop a tick that came during the failures
		}
		if failed {
			failed = false
			bo.Reset()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Stop ends the loop and waits for a run in progress to return.
func (s *Service) Stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		cancel, done := s.cancel, s.done
		s.mu.Unlock()
		if cancel != nil {
			cancel()
			<-done
		}
	})
}
