// Package batch gathers requests that many goroutines submit into
// batches, each written by one call, with a bounded number of writes in
// flight. The engine's park and resume writes of DeferUntil go through
// it: ten thousand tasks that park at once cost tens of statements, not
// ten thousand.
package batch

import (
	"errors"
	"sync"
	"time"
)

// ErrClosed answers a Submit after Close.
var ErrClosed = errors.New("batch writer closed")

// Gathering: after taking what has queued, a writer waits for more while
// Config.More says more are on their way, until none arrives for Quiet or
// Gather has passed. Requests of one burst (handlers of one claimed batch)
// arrive close together; without the wait the first of them would be
// written alone and the rest in the next batch, paying a statement and a
// commit for a handful.
const (
	Quiet  = 300 * time.Microsecond
	Gather = 2 * time.Millisecond
)

// Config builds a Writer.
type Config[T any] struct {
	// Max is the most requests in one batch; Writers how many batches may
	// be written at once (while one waits on its commit, the next is
	// gathered and written).
	Max, Writers int
	// Write writes a batch. It owns the batch's requests: answering each
	// is its business.
	Write func(batch []T)
	// More reports whether more requests are expected soon when n are
	// gathered (nil: never wait).
	More  func(n int) bool
	Clock func() time.Time
}

// Writer batches requests. Run it in a goroutine; Close stops it.
type Writer[T any] struct {
	cfg Config[T]

	mu     sync.Mutex
	queue  []T
	closed bool
	wake   chan struct{} // a submit since the loop last looked
	quit   chan struct{}
	done   chan struct{}
	once   sync.Once
	timer  *time.Timer // gathers; used by Run only
}

// New returns a writer; start it with go w.Run().
func New[T any](cfg Config[T]) *Writer[T] {
	if cfg.Writers < 1 {
		cfg.Writers = 1
	}
	if cfg.Max < 1 {
		cfg.Max = 1
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Writer[T]{cfg: cfg, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
}

// Submit queues r for the next batch. After Close it returns ErrClosed.
func (w *Writer[T]) Submit(r T) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.queue = append(w.queue, r)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return nil
}

// take removes up to n queued requests.
func (w *Writer[T]) take(n int) []T {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := min(n, len(w.queue))
	if k == 0 {
		return nil
	}
	out := make([]T, k)
	copy(out, w.queue)
	clear(w.queue[:k])
	w.queue = w.queue[k:]
	if len(w.queue) == 0 {
		w.queue = nil // drop the backing array of a burst
	}
	return out
}

// Close stops the writer after writing what has been submitted, and
// returns once every write has returned. Later submits get ErrClosed.
// Safe twice; Run must have been started.
func (w *Writer[T]) Close() {
	w.once.Do(func() {
		w.mu.Lock()
		w.closed = true
		w.mu.Unlock()
		close(w.quit)
	})
	<-w.done
}

// Run gathers and writes batches until Close.
func (w *Writer[T]) Run() {
	defer close(w.done)
	max := w.cfg.Max
	slots := make(chan struct{}, w.cfg.Writers)
	var inflight sync.WaitGroup
	write := func(batch []T) {
		slots <- struct{}{}
		inflight.Add(1)
		go func() {
			defer func() { <-slots; inflight.Done() }()
			w.cfg.Write(batch)
		}()
	}
	w.timer = time.NewTimer(time.Hour)
	w.timer.Stop()
	for {
		select {
		case <-w.wake:
		case <-w.quit:
			for batch := w.take(max); len(batch) > 0; batch = w.take(max) {
				write(batch)
			}
			inflight.Wait()
			return
		}
		for batch := w.gather(w.take(max)); len(batch) > 0; batch = w.take(max) {
			write(batch)
		}
	}
}

// gather adds requests that arrive shortly after the first ones (see
// Quiet and Gather).
func (w *Writer[T]) gather(batch []T) []T {
	max, clock := w.cfg.Max, w.cfg.Clock
	deadline := clock().Add(Gather)
	for len(batch) > 0 && len(batch) < max && w.cfg.More != nil && w.cfg.More(len(batch)) {
		wait := min(Quiet, deadline.Sub(clock()))
		if wait <= 0 {
			return batch
		}
		w.timer.Reset(wait)
		select {
		case <-w.wake:
			w.timer.Stop()
			batch = append(batch, w.take(max-len(batch))...)
		case <-w.timer.C:
			return batch
		}
	}
	return batch
}
