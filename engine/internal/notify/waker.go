package notify

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
)

// Announcing enqueues. PostgreSQL serializes the commits of notifying
// transactions across the cluster (a lock held from the start of the
// commit to its end), so enqueues from many goroutines that each NOTIFY
// take turns at their WAL flushes instead of sharing them: measured with
// 32 goroutines calling Enqueue, about 600 runs/s with the NOTIFY in
// every transaction against about 1,050 with none (`go run ./cmd/bench
// -scenario enqueue`). So an enqueue announces its ready queues in its
// own transaction only when no other enqueue of this process is in
// flight; the others commit without, and the waker announces them right
// after, all that committed while one announcement was being sent in the
// next. A lone enqueue is announced at its commit, as before; concurrent
// ones a round trip later.

// WakerStore is what the waker needs of the store.
type WakerStore interface {
	ReadyNotify(ctx context.Context, queues []string) error
}

// Waker decides which enqueues announce their ready queues in their
// transaction and announces the others after their commit. Enqueues
// inside the caller's transaction always announce in it: the waker cannot
// know when that commits. Every Begin is paired with an End; Close is
// safe twice.
type Waker struct {
	st     WakerStore
	health *backoff.Loop

	inflight atomic.Int64 // enqueues between begin and end
	quiet    atomic.Int64 // enqueues announced after their commit, for tests

	closed atomic.Bool // after close: every enqueue announces itself

	mu      sync.Mutex
	pending map[string]bool // queues to announce next
	sending bool            // a goroutine (or a closing end) is announcing
	sends   sync.WaitGroup  // the announcing goroutine
}

// NewWaker returns a waker that announces through st; its failures are
// reported to health as the loop "waker".
func NewWaker(st WakerStore, health *backoff.Health) *Waker {
	return &Waker{st: st, health: health.Loop("waker"), pending: map[string]bool{}}
}

// Begin reports whether an enqueue announces its queues in its own
// transaction: when no other enqueue of this process is in flight, or
// the waker is closed. Every Begin is paired with an End.
func (w *Waker) Begin() (inline bool) {
	alone := w.inflight.Add(1) == 1
	return alone || w.closed.Load()
}

// End closes an enqueue's Begin: one that committed without announcing
// (inline false, committed true) has its queues announced now.
func (w *Waker) End(queues []string, inline, committed bool) {
	w.inflight.Add(-1)
	if inline || !committed {
		return
	}
	w.quiet.Add(1)
	w.mu.Lock()
	for _, q := range queues {
		w.pending[q] = true
	}
	start := !w.sending && !w.closed.Load()
	w.sending = w.sending || start
	w.mu.Unlock()
	switch {
	case start:
		w.sends.Add(1)
		go func() {
			defer w.sends.Done()
			w.send()
		}()
	case w.closed.Load():
		w.send() // closing: no goroutine outlives close
	}
}

// Quiet returns how many enqueues were announced after their commit.
func (w *Waker) Quiet() int64 { return w.quiet.Load() }

// send announces the pending queues until none is left.
func (w *Waker) send() {
	for {
		w.mu.Lock()
		if len(w.pending) == 0 {
			w.sending = false
			w.mu.Unlock()
			return
		}
		queues := make([]string, 0, len(w.pending))
		for q := range w.pending {
			queues = append(queues, q)
		}
		clear(w.pending)
		w.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		// A lost announcement delays the work until a worker polls; it
		// loses nothing.
		if err := w.st.ReadyNotify(ctx, queues); err != nil {
			w.health.Fail(ctx, err)
		} else {
			w.health.OK(ctx)
		}
		cancel()
	}
}

// Close makes every later enqueue announce itself and waits for the
// announcing goroutine.
func (w *Waker) Close() {
	w.mu.Lock()
	w.closed.Store(true)
	w.mu.Unlock()
	w.sends.Wait()
}
