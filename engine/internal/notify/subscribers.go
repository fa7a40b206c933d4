package notify

import (
	"sync"
	"sync/atomic"
)

// subscribers fans messages out to in-process consumers without ever
// blocking: a consumer whose buffer is full misses messages (counted).
type subscribers[T any] struct {
	mu      sync.Mutex
	next    int
	chans   map[int]chan T
	dropped atomic.Int64
}

// add returns a new consumer's channel of buffer messages (at least one)
// and the function that ends it, safe twice and after closeAll.
func (s *subscribers[T]) add(buffer int) (<-chan T, func()) {
	ch := make(chan T, max(buffer, 1))
	s.mu.Lock()
	if s.chans == nil {
		s.chans = map[int]chan T{}
	}
	id := s.next
	s.next++
	s.chans[id] = ch
	s.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if c, ok := s.chans[id]; ok {
				close(c)
				delete(s.chans, id)
			}
		})
	}
}

func (s *subscribers[T]) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.chans)
}

func (s *subscribers[T]) publish(msgs []T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.chans {
		for _, m := range msgs {
			select {
			case ch <- m:
			default:
				s.dropped.Add(1)
			}
		}
	}
}

func (s *subscribers[T]) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ch := range s.chans {
		close(ch)
		delete(s.chans, id)
	}
}

// runWaiters are the WaitRun calls of this process, by run: woken when the
// database announces that an awaited run ended, and all of them after the
// listener reconnects.
type runWaiters struct {
	mu sync.Mutex
	m  map[int64]map[chan struct{}]struct{}
}

// add registers a wait for run id; done removes it.
func (w *runWaiters) add(id int64) (woken <-chan struct{}, done func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[int64]map[chan struct{}]struct{}{}
	}
	if w.m[id] == nil {
		w.m[id] = map[chan struct{}]struct{}{}
	}
	w.m[id][ch] = struct{}{}
	return ch, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.m[id], ch)
		if len(w.m[id]) == 0 {
			delete(w.m, id)
		}
	}
}

// wake wakes the waits for the runs ids (all of them with none given).
func (w *runWaiters) wake(ids ...int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	poke := func(chs map[chan struct{}]struct{}) {
		for ch := range chs {
			select {
			case ch <- struct{}{}:
			default: // already woken
			}
		}
	}
	if len(ids) == 0 {
		for _, chs := range w.m {
			poke(chs)
		}
		return
	}
	for _, id := range ids {
		poke(w.m[id])
	}
}
