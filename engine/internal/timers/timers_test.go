package timers

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

	a := NewAttempt(time.Hour, clock, func() {})
	defer a.Stop()
	advance(10 * time.Minute)
	a.Pause()
	advance(5 * time.Hour) // deferred: does not count
	a.Resume()
	advance(20 * time.Minute)
	a.Pause()
	a.mu.Lock()
	remaining := a.remaining
	a.mu.Unlock()
	if remaining != 30*time.Minute {
		t.Fatalf("remaining %s after 30 min running by the engine's clock, want 30m0s", remaining)
	}
}

func TestWakeupsShareOneTimerAndStopOnRemove(t *testing.T) {
	t.Parallel()
	w := NewWakeups(time.Now)
	defer w.Stop()
	const n = 200
	chans := make([]chan struct{}, n)
	entries := make([]*Wakeup, n)
	for i := range chans {
		chans[i] = make(chan struct{}, 1)
		// Different intervals: the one timer serves each at its own pace.
		entries[i] = w.Add(chans[i], time.Duration(1+i%5)*time.Millisecond)
	}
	if got := w.Len(); got != n {
		t.Fatalf("waiting: %d, want %d", got, n)
	}
	// Every entry is woken, twice (the interval repeats).
	for round := range 2 {
		for i, ch := range chans {
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Fatalf("entry %d not woken in round %d", i, round)
			}
		}
	}
	for _, wk := range entries {
		w.Remove(wk)
		w.Remove(wk) // safe twice
	}
	if got := w.Len(); got != 0 {
		t.Fatalf("waiting after remove: %d", got)
	}
	// Removed entries get no more wake-ups: drain what was sent before
	// the removal, then a fresh entry's wake-up (later than any tick of
	// the removed ones would be) finds the old channels empty.
	for _, ch := range chans {
		select {
		case <-ch:
		default:
		}
	}
	probe := make(chan struct{}, 1)
	pw := w.Add(probe, 20*time.Millisecond)
	select {
	case <-probe:
	case <-time.After(10 * time.Second):
		t.Fatal("probe not woken")
	}
	w.Remove(pw)
	for i, ch := range chans {
		select {
		case <-ch:
			t.Fatalf("entry %d woken after remove", i)
		default:
		}
	}
}
