package executor_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/store"
)

// drainConfig is a drain with a short grace and hard wait; interrupted
// records what Interrupt was given.
func drainConfig(interrupted *[]store.TransitionItem, mu *sync.Mutex) executor.DrainConfig {
	return executor.DrainConfig{Grace: 50 * time.Millisecond, Hard: 50 * time.Millisecond, ProgressEvery: time.Hour,
		Cause: errShutdown, Clock: time.Now, Logger: slog.New(slog.DiscardHandler),
		Interrupt: func(_ context.Context, items []store.TransitionItem) {
			mu.Lock()
			defer mu.Unlock()
			*interrupted = append(*interrupted, items...)
		}}
}

// A parked task is cancelled at once, without waiting for the grace; a
// running handler that returns within the grace is not cancelled; the
// drain returns once both returned, interrupting nothing.
func TestDrainCancelsParkedAtOnceAndWaitsForRunning(t *testing.T) {
	var r executor.Running[*exec]
	causes := make(chan error, 2)
	release := make(chan struct{})
	r.Open(context.Background(), func(ctx context.Context, x *exec) {
		if x.Parked.Load() {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return
		}
		<-release
		causes <- context.Cause(ctx)
	})
	parked, running := newExec(1), newExec(2)
	parked.Parked.Store(true)
	r.Go(parked)
	r.Go(running)

	var mu sync.Mutex
	var interrupted []store.TransitionItem
	cfg := drainConfig(&interrupted, &mu)
	cfg.Grace = time.Hour
	drained := make(chan struct{})
	go func() { r.Drain(context.Background(), cfg); close(drained) }()
	require.ErrorIs(t, <-causes, errShutdown, "the parked task is cancelled at once")
	close(release)
	require.NoError(t, <-causes, "the running handler returned uncancelled")
	<-drained
	require.Empty(t, interrupted)
}

// A handler that ignores its cancelled context is interrupted without
// it once the hard wait is over: its task's interrupt rule is written.
func TestDrainInterruptsAHandlerThatIgnoresTheCancel(t *testing.T) {
	var r executor.Running[*exec]
	release := make(chan struct{})
	r.Open(context.Background(), func(context.Context, *exec) { <-release })
	stubborn := newExec(7)
	stubborn.Task.Attempt = 1
	stubborn.Task.MaxAttempts = 3
	r.Go(stubborn)

	var mu sync.Mutex
	var interrupted []store.TransitionItem
	r.Drain(context.Background(), drainConfig(&interrupted, &mu))
	close(release)
	r.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, interrupted, 1)
	require.Equal(t, int64(7), interrupted[0].TaskID)
	require.Equal(t, store.StatusInterrupted, interrupted[0].To)
}

// A drain whose context ends cuts the grace short.
func TestDrainEndsTheGraceWithItsContext(t *testing.T) {
	var r executor.Running[*exec]
	cause := make(chan error, 1)
	r.Open(context.Background(), func(ctx context.Context, _ *exec) { <-ctx.Done(); cause <- context.Cause(ctx) })
	r.Go(newExec(1))
	var mu sync.Mutex
	var interrupted []store.TransitionItem
	cfg := drainConfig(&interrupted, &mu)
	cfg.Grace = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Drain(ctx, cfg)
	require.ErrorIs(t, <-cause, errShutdown)
	require.Empty(t, interrupted)
}
