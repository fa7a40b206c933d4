package lifecycle_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/lifecycle"
)

// svc records its starts and stops in a shared log.
type svc struct {
	name string
	log  *[]string
	mu   *sync.Mutex
	fail error
}

func (s svc) Start(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	*s.log = append(*s.log, "start "+s.name)
	return s.fail
}

func (s svc) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	*s.log = append(*s.log, "stop "+s.name)
}

func TestGroupsStartInOrderAndStopAtTheFirstError(t *testing.T) {
	var log []string
	var mu sync.Mutex
	mk := func(name string, fail error) lifecycle.Service {
		return svc{name: name, log: &log, mu: &mu, fail: fail}
	}
	g := lifecycle.Groups{Writers: []lifecycle.Service{mk("completer", nil)}, Producers: []lifecycle.Service{mk("producer", nil)},
		Background: []lifecycle.Service{mk("heartbeat", nil), mk("rescuer", nil)}}
	require.NoError(t, g.Start(context.Background()))
	require.Equal(t, []string{"start completer", "start producer", "start heartbeat", "start rescuer"}, log)

	log = nil
	lifecycle.StopInTurn(g.Background)
	require.Equal(t, []string{"stop heartbeat", "stop rescuer"}, log)
	log = nil
	lifecycle.StopTogether([]lifecycle.Service{mk("a", nil), mk("b", nil)})
	require.ElementsMatch(t, []string{"stop a", "stop b"}, log)

	log = nil
	boom := errors.New("boom")
	g = lifecycle.Groups{Writers: []lifecycle.Service{mk("w", boom)}, Producers: []lifecycle.Service{mk("p", nil)}}
	require.ErrorIs(t, g.Start(context.Background()), boom)
	require.Equal(t, []string{"start w"}, log, "nothing starts after a failure")
}

func TestLifeStartsOnceAndStopsOnce(t *testing.T) {
	l := lifecycle.New()
	mine, err := l.BeginStop(context.Background())
	require.NoError(t, err)
	require.False(t, mine, "nothing to stop before a start")

	boom := errors.New("boom")
	require.ErrorIs(t, l.Start(context.Background(), func(context.Context) error { return boom }, func() {}), boom)
	var loops context.Context
	require.NoError(t, l.Start(context.Background(), func(ctx context.Context) error { loops = ctx; return nil }, func() {}),
		"a failed start may be tried again")
	require.ErrorIs(t, l.Start(context.Background(), func(context.Context) error { return nil }, func() {}), lifecycle.ErrStarted)

	mine, err = l.BeginStop(context.Background())
	require.NoError(t, err)
	require.True(t, mine)
	require.True(t, l.Stopping())

	// A second stop waits for the first, or for its own context.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = l.BeginStop(cancelled)
	require.ErrorIs(t, err, context.Canceled)
	second := make(chan bool)
	go func() { m, _ := l.BeginStop(context.Background()); second <- m }()
	require.NoError(t, loops.Err(), "the loops run until the stop cancels them")
	l.CancelLoops()
	require.Error(t, loops.Err())
	l.EndStop()
	require.False(t, <-second)
}

// The end of Start's context stops the engine.
func TestLifeStopsWhenStartsContextEnds(t *testing.T) {
	l := lifecycle.New()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	require.NoError(t, l.Start(ctx, func(context.Context) error { return nil }, func() {
		mine, err := l.BeginStop(context.Background())
		if mine && err == nil {
			l.EndStop()
		}
		close(stopped)
	}))
	cancel()
	<-stopped
	require.True(t, l.Stopping())
}
