package engine

import (
	"context"
	"sync"
)

// slots is a FIFO counting semaphore: waiters (deferred tasks coming back)
// are served in arrival order, and new claims only take slots nobody
// waits for.
type slots struct {
	mu      sync.Mutex
	free    int
	waiters []chan struct{}
	onFree  func()
}

func newSlots(n int, onFree func()) *slots { return &slots{free: n, onFree: onFree} }

// tryAcquireUpTo takes up to n free slots when nobody waits, and returns
// how many it took.
func (s *slots) tryAcquireUpTo(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiters) > 0 {
		return 0
	}
	k := min(n, s.free)
	s.free -= k
	return k
}

// acquire waits for one slot in FIFO order.
func (s *slots) acquire(ctx context.Context) error {
	s.mu.Lock()
	if s.free > 0 && len(s.waiters) == 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for i, w := range s.waiters {
			if w == ch {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				s.mu.Unlock()
				return ctx.Err()
			}
		}
		s.mu.Unlock()
		s.release(1) // granted while we gave up: pass it on
		return ctx.Err()
	}
}

// release returns n slots, handing them to waiters first, and wakes the
// claim loop when some are left free.
func (s *slots) release(n int) {
	if free := s.releaseQuiet(n); free > 0 && s.onFree != nil {
		s.onFree()
	}
}

// releaseQuiet returns n slots without waking the claim loop (used right
// after a claim that found less work than slots) and reports how many were
// left free after serving waiters.
func (s *slots) releaseQuiet(n int) int {
	if n <= 0 {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for n > 0 && len(s.waiters) > 0 {
		close(s.waiters[0])
		s.waiters = s.waiters[1:]
		n--
	}
	s.free += n
	return n
}

// waiting returns how many wait for a slot.
func (s *slots) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}

// available returns the number of free slots.
func (s *slots) available() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.free
}
