package engine

import (
	"sync"
	"time"
)

// attemptTimer fires fn once an attempt has run for its timeout, not
// counting the time it was paused (deferred). A real timer fires fn; the
// time spent running is read from clock (the engine's).
type attemptTimer struct {
	mu        sync.Mutex
	clock     func() time.Time
	fn        func()
	remaining time.Duration
	since     time.Time
	t         *time.Timer
	done      bool
}

func newAttemptTimer(d time.Duration, clock func() time.Time, fn func()) *attemptTimer {
	a := &attemptTimer{clock: clock, fn: fn, remaining: d}
	a.resume()
	return a
}

// pause stops the clock; resume restarts it with what was left.
func (a *attemptTimer) pause() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done || a.t == nil {
		return
	}
	if a.t.Stop() {
		a.remaining -= a.clock().Sub(a.since)
	}
	a.t = nil
}

func (a *attemptTimer) resume() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done || a.t != nil {
		return
	}
	a.since = a.clock()
	a.t = time.AfterFunc(max(a.remaining, 0), a.fn)
}

func (a *attemptTimer) stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.done = true
	if a.t != nil {
		a.t.Stop()
	}
}
