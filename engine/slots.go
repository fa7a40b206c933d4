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
	waiters []*slotWaiter
	onFree  func()
}

// slotWaiter is a deferred task waiting for a slot. It is served either
// by a plain grant (a freed slot; the task then writes its own resume) or
// by a hand-off: a completion write that frees slots takes waiters off the
// queue first and moves their rows deferred -> running in its own
// transaction, so the slot passes from the finished task to the resumed
// one at one commit.
type slotWaiter struct {
	ex     *execution
	ch     chan struct{} // closed when served
	handed bool          // taken by a completion write (set under slots.mu)
	err    error         // of a hand-off: nil resumed, ErrTaskLost; set before ch closes
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
	_, err := s.acquireFor(ctx, nil)
	return err
}

// acquireFor waits for one slot in FIFO order for ex, a deferred task
// coming back. It returns the waiter when the slot came by hand-off (see
// slotWaiter: the row was moved, or found lost, by the completion write,
// and ex.holdsSlot is set), nil when it is a plain slot the caller now
// holds. When ctx ends first it returns ctx's error, and the waiter if a
// hand-off was already under way (it waits for that write to end: the
// slot is then held by ex).
func (s *slots) acquireFor(ctx context.Context, ex *execution) (*slotWaiter, error) {
	s.mu.Lock()
	if s.free > 0 && len(s.waiters) == 0 {
		s.free--
		s.mu.Unlock()
		return nil, nil
	}
	w := &slotWaiter{ex: ex, ch: make(chan struct{})}
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
		s.release(1) // granted while we gave up: pass it on
		return nil, ctx.Err()
	}
}

// handOff takes up to n waiters of deferred tasks off the queue for a
// completion write that frees n slots (see slotWaiter).
func (s *slots) handOff(n int) []*slotWaiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*slotWaiter
	for len(out) < n && len(s.waiters) > 0 && s.waiters[0].ex != nil {
		w := s.waiters[0]
		w.handed = true
		out = append(out, w)
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
	}
	return out
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
		close(s.waiters[0].ch)
		s.waiters[0] = nil
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
