// Package timers holds the engine's timers of running and parked tasks:
// an attempt's timeout clock, which stops while the task is deferred, and
// the one shared timer that wakes parked tasks at their intervals. Both
// read time from an injected clock (the engine's).
package timers

import (
	"container/heap"
	"sync"
	"time"
)

// Attempt fires fn once an attempt has run for its timeout, not
// counting the time it was paused (deferred). A real timer fires fn; the
// time spent running is read from clock (the engine's).
type Attempt struct {
	mu        sync.Mutex
	clock     func() time.Time
	fn        func()
	remaining time.Duration
	since     time.Time
	t         *time.Timer
	done      bool
}

// NewAttempt starts an attempt's clock of d.
func NewAttempt(d time.Duration, clock func() time.Time, fn func()) *Attempt {
	a := &Attempt{clock: clock, fn: fn, remaining: d}
	a.Resume()
	return a
}

// Pause stops the clock; Resume restarts it with what was left.
func (a *Attempt) Pause() {
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

func (a *Attempt) Resume() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done || a.t != nil {
		return
	}
	a.since = a.clock()
	a.t = time.AfterFunc(max(a.remaining, 0), a.fn)
}

func (a *Attempt) Stop() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.done = true
	if a.t != nil {
		a.t.Stop()
	}
}

// Wakeups sends on the signal channel of each parked task every time its
// interval elapses, with one timer for all of them: a parked task costs a
// small heap entry, not a ticker. Times are read from the engine's clock.
type Wakeups struct {
	clock func() time.Time

	mu    sync.Mutex
	h     wakeHeap
	timer *time.Timer
	armed time.Time // when timer fires; zero when it is not armed
}

// Wakeup is one parked task's entry.
type Wakeup struct {
	at    time.Time
	every time.Duration
	ch    chan struct{}
	idx   int // position in the heap, -1 once removed
}

func NewWakeups(clock func() time.Time) *Wakeups { return &Wakeups{clock: clock} }

// Add sends on ch every interval from now until Remove.
func (w *Wakeups) Add(ch chan struct{}, every time.Duration) *Wakeup {
	wk := &Wakeup{at: w.clock().Add(every), every: every, ch: ch}
	w.mu.Lock()
	defer w.mu.Unlock()
	heap.Push(&w.h, wk)
	w.arm()
	return wk
}

// Every is the entry's interval.
func (wk *Wakeup) Every() time.Duration { return wk.every }

// Remove stops wk's wake-ups. Safe twice.
func (w *Wakeups) Remove(wk *Wakeup) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wk.idx >= 0 {
		heap.Remove(&w.h, wk.idx)
	}
	// The timer may now fire for nothing; fire re-arms it.
}

// Len returns how many tasks are waiting for wake-ups.
func (w *Wakeups) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.h)
}

// arm makes the timer fire at the earliest entry. w.mu is held.
func (w *Wakeups) arm() {
	if len(w.h) == 0 {
		return
	}
	next := w.h[0].at
	if !w.armed.IsZero() && !next.Before(w.armed) {
		return
	}
	w.armed = next
	d := next.Sub(w.clock())
	if w.timer == nil {
		w.timer = time.AfterFunc(d, w.fire)
	} else {
		w.timer.Reset(d)
	}
}

// fire wakes every entry that is due and re-arms the timer.
func (w *Wakeups) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed = time.Time{}
	now := w.clock()
	for len(w.h) > 0 && !w.h[0].at.After(now) {
		wk := w.h[0]
		select {
		case wk.ch <- struct{}{}:
		default:
		}
		if wk.at = wk.at.Add(wk.every); !wk.at.After(now) {
			wk.at = now.Add(wk.every) // late: no burst of missed ticks
		}
		heap.Fix(&w.h, 0)
	}
	w.arm()
}

// Stop stops the timer.
func (w *Wakeups) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
	}
}

type wakeHeap []*Wakeup

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h wakeHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *wakeHeap) Push(x any) {
	wk := x.(*Wakeup)
	wk.idx = len(*h)
	*h = append(*h, wk)
}
func (h *wakeHeap) Pop() any {
	old := *h
	wk := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	wk.idx = -1
	return wk
}
