// Package claim runs the engine's claim loops: each waits for a wake-up
// (NOTIFY, a freed slot, the poll timer), claims as many tasks as it has
// free slots in one statement, and backs off while the database fails.
// What a claim is (which statement, which slots, which handlers start)
// is the engine's, given as a function.
package claim

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
)

// refreshEvery is how many poll ticks pass between two Refresh calls.
const refreshEvery = 10

// Loop is one claimer of a queue.
type Loop struct {
	// Name is the loop's name in the health tracker ("claim:QUEUE").
	Name string
	// Poll is the interval of a claim without a wake-up.
	Poll   time.Duration
	Health *backoff.Health
	// Claim claims once and returns how many tasks it asked for (0: no
	// free slot, nothing was queried) and how many it got.
	Claim func(ctx context.Context) (asked, got int, err error)
	// More reports whether to claim again at once after a claim that
	// asked and got (every slot filled, say): more may wait.
	More func(asked, got int) bool
	// Refresh runs every tenth poll tick (the engine re-reads the
	// queue's cap). May be nil.
	Refresh func(ctx context.Context)
}

// Run claims until ctx is done or stop is closed, after each claim
// waiting for wake, the poll tick or (after a failure) a backoff, which
// no wake-up cuts short.
func (l *Loop) Run(ctx context.Context, stop, wake <-chan struct{}) {
	ticker := time.NewTicker(l.Poll)
	defer ticker.Stop()
	health := l.Health.Loop(l.Name)
	bo := backoff.New(rand.Float64)
	polls := 0
	for {
		select {
		case <-stop:
			return
		default:
		}
		asked, got, err := l.Claim(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			health.Fail(ctx, err)
			if !l.Health.Wait(ctx, stop, bo.Next()) {
				return
			}
			continue
		}
		if asked > 0 {
			health.OK(ctx)
			bo.Reset()
			if got > 0 && l.More(asked, got) {
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-wake:
		case <-ticker.C:
			if polls++; polls%refreshEvery == 0 && l.Refresh != nil {
				l.Refresh(ctx)
			}
		}
	}
}
