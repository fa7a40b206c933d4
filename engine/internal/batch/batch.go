// Package batch gathers requests that many goroutines submit into
// batches, each written by one call, with a bounded number of writes in
// flight. The engine's completion writes (finished attempts) and the park
// and resume writes of DeferUntil go through it: ten thousand tasks that
// finish or park at once cost tens of statements, not ten thousand.
package batch

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
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
	// is its business. It must not keep the batch (the slice) after it
	// returns: batches are reused.
	Write func(batch []T)
	// More reports whether more requests are expected soon when n are
	// gathered (nil: never wait).
	More func(n int) bool
	// Key, when set, keeps apart requests of one key: a request whose key
	// is in a batch being written waits for that write and goes in a
	// later batch. (Two completion writes of one run would update the
	// same run row: the second would wait on the first's row locks with
	// all its batch, and the writers would take turns.)
	Key   func(T) int64
	Clock func() time.Time
}

// Writer batches requests. Run it in a goroutine; Close stops it.
type Writer[T any] struct {
	cfg Config[T]

	mu      sync.Mutex
	queue   []T
	started bool // Start ran the loop
	closed  bool
	wake    chan struct{}  // a submit, or a write with keys done, since the loop last looked
	busy    map[int64]bool // keys of the batches being written (Config.Key)
	quit    chan struct{}
	done    chan struct{}
	once    sync.Once
	timer   *time.Timer // gathers; used by Run only
	bufs    sync.Pool   // of *[]T: written batches, for reuse

	writing atomic.Int64 // requests in batches being written
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
	return &Writer[T]{cfg: cfg, wake: make(chan struct{}, 1), busy: map[int64]bool{}, quit: make(chan struct{}), done: make(chan struct{})}
}

// Writing returns how many requests are in batches being written.
func (w *Writer[T]) Writing() int { return int(w.writing.Load()) }

// Submit queues r for the next batch. After Close it returns ErrClosed.
func (w *Writer[T]) Submit(r T) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrClosed
	}
	w.queue = append(w.queue, r)
	w.mu.Unlock()
	w.poke()
	return nil
}

// poke wakes the loop.
func (w *Writer[T]) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// takeInto moves queued requests to dst until it holds max.
func (w *Writer[T]) takeInto(dst []T, max int) []T {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := min(max-len(dst), len(w.queue))
	if k <= 0 {
		return dst
	}
	dst = append(dst, w.queue[:k]...)
	// The rest moves to the front: the queue's array is reused, not
	// regrown from nothing at every burst.
	n := copy(w.queue, w.queue[k:])
	clear(w.queue[n:])
	w.queue = w.queue[:n]
	if n == 0 && cap(w.queue) > 4*max {
		w.queue = nil // drop the array of an unusual burst
	}
	return dst
}

// buf returns an empty batch of capacity Max. Batches are reused once
// written (a batch of a thousand completions is a large allocation to
// zero and collect): Write must not keep its batch after it returns.
func (w *Writer[T]) buf() []T {
	if b, ok := w.bufs.Get().(*[]T); ok {
		return (*b)[:0]
	}
	return make([]T, 0, w.cfg.Max)
}

// reuse takes back a batch after its write.
func (w *Writer[T]) reuse(b []T) {
	if cap(b) < w.cfg.Max {
		return
	}
	b = b[:cap(b)]
	clear(b) // its requests are done with
	w.bufs.Put(&b)
}

// Start runs the writer in a goroutine of its own and returns at once: a
// service's Start. A second Start, or one after Stop, does nothing.
func (w *Writer[T]) Start(context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.started && !w.closed {
		w.started = true
		go w.Run()
	}
	return nil
}

// Stop writes what was submitted and stops the writer (see Close): a
// service's Stop. Safe twice; before Start it only refuses later submits.
func (w *Writer[T]) Stop() {
	w.mu.Lock()
	started := w.started
	w.closed = true
	w.mu.Unlock()
	if started {
		w.Close()
	}
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
		keys := w.mark(batch)
		slots <- struct{}{}
		inflight.Add(1)
		w.writing.Add(int64(len(batch)))
		go func() {
			defer func() {
				w.writing.Add(-int64(len(batch)))
				w.unmark(keys)
				<-slots
				inflight.Done()
			}()
			w.cfg.Write(batch)
			w.reuse(batch)
		}()
	}
	w.timer = time.NewTimer(time.Hour)
	w.timer.Stop()
	var held []T // requests waiting for the write of their key
	for {
		select {
		case <-w.wake:
		case <-w.quit:
			// What is left goes now, held requests too (their keys'
			// writes are in flight: the row locks order them).
			for len(held) > 0 {
				n := min(max, len(held))
				write(held[:n:n])
				held = held[n:]
			}
			for batch := w.takeInto(w.buf(), max); len(batch) > 0; batch = w.takeInto(w.buf(), max) {
				write(batch)
			}
			inflight.Wait()
			return
		}
		for {
			batch := append(w.buf(), held...)
			held = nil
			batch = w.gather(w.takeInto(batch, max))
			var free []T
			free, held = w.split(batch)
			if len(free) == 0 {
				// Nothing queued, or all held: a write in flight wakes
				// the loop when done.
				w.reuse(batch)
				break
			}
			write(free)
		}
	}
}

// mark records the keys of a batch about to be written (none without
// Config.Key).
func (w *Writer[T]) mark(batch []T) []int64 {
	if w.cfg.Key == nil {
		return nil
	}
	keys := make([]int64, 0, len(batch))
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range batch {
		if k := w.cfg.Key(r); !w.busy[k] {
			w.busy[k] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// unmark forgets the keys of a written batch and wakes the loop for the
// requests held back by them.
func (w *Writer[T]) unmark(keys []int64) {
	if len(keys) == 0 {
		return
	}
	w.mu.Lock()
	for _, k := range keys {
		delete(w.busy, k)
	}
	w.mu.Unlock()
	w.poke()
}

// split divides batch into the requests that may be written now and
// those whose key is in a batch being written.
func (w *Writer[T]) split(batch []T) (free, held []T) {
	if w.cfg.Key == nil {
		return batch, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	free = batch[:0] // filtered in place
	for _, r := range batch {
		if w.busy[w.cfg.Key(r)] {
			held = append(held, r)
		} else {
			free = append(free, r)
		}
	}
	return free, held
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
			batch = w.takeInto(batch, max)
		case <-w.timer.C:
			return batch
		}
	}
	return batch
}
