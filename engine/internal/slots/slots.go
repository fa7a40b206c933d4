// Package slots is the engine's per-queue concurrency semaphore: a FIFO
// counting semaphore whose waiters (deferred tasks coming back) are
// served in arrival order, and whose free slots new claims take only
// when nobody waits.
package slots

import (
	"context"
	"sync"
)

// Slots is a FIFO counting semaphore. T is what a waiter carries (the
// engine's execution of a deferred task), for a hand-off (see Waiter).
type Slots[T any] struct {
	mu      sync.Mutex
	free    int
	waiters []*Waiter[T]
	onFree  func()
}

// Waiter is a deferred task waiting for a slot. It is served either by a
// plain grant (a freed slot; the task then writes its own resume) or by a
// hand-off: a completion write that frees slots takes waiters off the
// queue first and moves their rows deferred -> running in its own
// transaction, so the slot passes from the finished task to the resumed
// one at one commit.
type Waiter[T any] struct {
	Item   T
	ch     chan struct{} // closed when served
	item   bool          // carries an Item: may be handed off
	handed bool          // taken by a hand-off (set under Slots.mu)
	err    error         // of a hand-off: nil resumed; set before ch closes
}

// Err is the outcome of a hand-off: nil when the write moved the row.
func (w *Waiter[T]) Err() error { return w.err }

// Done ends a hand-off taken by HandOff: err is its outcome (nil: the
// row moved), read by the waiter once it returns.
func (w *Waiter[T]) Done(err error) {
	w.err = err
	close(w.ch)
}

// New returns n free slots; onFree is called when a release leaves some
// free (to wake the claim loops).
func New[T any](n int, onFree func()) *Slots[T] { return &Slots[T]{free: n, onFree: onFree} }

// TryAcquireUpTo takes up to n free slots when nobody waits, and returns
// how many it took.
func (s *Slots[T]) TryAcquireUpTo(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiters) > 0 {
		return 0
	}
	k := min(n, s.free)
	s.free -= k
	return k
}

// Acquire waits for one slot in FIFO order.
func (s *Slots[T]) Acquire(ctx context.Context) error {
	_, err := s.acquire(ctx, nil, false)
	return err
}

// AcquireFor waits for one slot in FIFO order for item, a deferred task
// coming back. It returns the waiter when the slot came by hand-off (the
// row was moved, or found lost, by the completion write, see Waiter.Err;
// the slot is held by item), nil when it is a plain slot the caller now
// holds. When ctx ends first it returns ctx's error, and the waiter if a
// hand-off was already under way (it waits for that write to end: the
// slot is then held by item).
func (s *Slots[T]) AcquireFor(ctx context.Context, item T) (*Waiter[T], error) {
	return s.acquire(ctx, &item, true)
}

func (s *Slots[T]) acquire(ctx context.Context, item *T, handable bool) (*Waiter[T], error) {
	s.mu.Lock()
	if s.free > 0 && len(s.waiters) == 0 {
		s.free--
		s.mu.Unlock()
		return nil, nil
	}
	w := &Waiter[T]{ch: make(chan struct{}), item: handable}
	if item != nil {
		w.Item = *item
	}
	s.waiters = append(s.waiters, w)
	s.mu.Unlock()
	select {
	case <-w.ch:
		if w.handed {
			return w, nil
		}
		return nil, nil
	case <-ctx.Done():
		s.mu.Lock()
		for i, x := range s.waiters {
			if x == w {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				s.mu.Unlock()
				return nil, ctx.Err()
			}
		}
		handed := w.handed
		s.mu.Unlock()
		<-w.ch // served meanwhile (a hand-off may still be writing)
		if handed {
			return w, ctx.Err()
		}
		s.Release(1) // granted while we gave up: pass it on
		return nil, ctx.Err()
	}
}

// HandOff takes up to n waiters that carry an item off the front of the
// queue, for a completion write that frees n slots (see Waiter). End
// each with Done.
func (s *Slots[T]) HandOff(n int) []*Waiter[T] {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Waiter[T]
	for len(out) < n && len(s.waiters) > 0 && s.waiters[0].item {
		w := s.waiters[0]
		w.handed = true
		out = append(out, w)
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
	}
	return out
}

// Release returns n slots, handing them to waiters first, and calls
// onFree when some are left free.
func (s *Slots[T]) Release(n int) {
	if free := s.ReleaseQuiet(n); free > 0 && s.onFree != nil {
		s.onFree()
	}
}

// ReleaseQuiet returns n slots without calling onFree (used right after
// a claim that found less work than slots) and reports how many were left
// free after serving waiters.
func (s *Slots[T]) ReleaseQuiet(n int) int {
	if n <= 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for n > 0 && len(s.waiters) > 0 {
		close(s.waiters[0].ch)
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
		n--
	}
	s.free += n
	return n
}

// Waiting returns how many wait for a slot.
func (s *Slots[T]) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}

// Available returns the number of free slots.
func (s *Slots[T]) Available() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.free
}
