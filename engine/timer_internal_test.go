package engine

import (
	"sync"
	"testing"
	"time"
)

// The attempt timer measures running time with the engine's clock: time
// the clock says passed while running counts, time paused does not.
func TestAttemptTimerMeasuresRunningTimeWithEngineClock(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	a := newAttemptTimer(time.Hour, clock, func() {})
	defer a.stop()
	advance(10 * time.Minute)
	a.pause()
	advance(5 * time.Hour) // deferred: does not count
	a.resume()
	advance(20 * time.Minute)
	a.pause()
	a.mu.Lock()
	remaining := a.remaining
	a.mu.Unlock()
	if remaining != 30*time.Minute {
		t.Fatalf("remaining %s after 30 min running by the engine's clock, want 30m0s", remaining)
	}
}
