package producer

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine/internal/slots"
)

// Queue is one queue of an engine, which claims and runs its tasks with
// a fixed number of slots: the slots (executions of type E), the
// wake-ups of its claim loops, what its last claim found, its floors.
// The producer's claim loops and its side of completion writes (Along)
// run on it.
type Queue[E any] struct {
	Name  string
	Size  int
	Slots *slots.Slots[E]
	// Capped is set while the queue has a cap on its running tasks
	// (claims count it under a lock).
	Capped atomic.Bool
	// CapStale is set while the last read of the cap failed: Capped
	// stays set and the next claim reads the cap again.
	CapStale atomic.Bool
	// Pokes counts the wake-ups asked for (see Poke): work announced. A
	// claim that found the queue empty stays the last word on it while
	// the count stays where it was when that claim began (see drained).
	Pokes atomic.Uint64
	// Claims counts the claim loops' statements, for tests.
	Claims atomic.Int64
	// After is where the queue's next keyed claim starts its turn across
	// keys (see store.ClaimParams.After).
	After atomic.Pointer[string]
	// Floor is where the queue's unkeyed claims start in claim order,
	// KeyedFloor where its keyed claims start in available_at order.
	Floor      Floor
	KeyedFloor KeyedFloor

	wakes    []chan struct{} // one per claimer
	done     chan struct{}   // closed to stop claiming
	exited   chan struct{}   // closed when every claimer has returned
	stopOnce sync.Once
	stopMu   sync.Mutex     // orders Stop against BeginClaim
	claiming sync.WaitGroup // completion writes claiming along (BeginClaim)
	began    atomic.Bool    // its claim loops were started (see Go)
	// drained is 1 + the Pokes count read before the last claim that
	// found the queue empty (fewer unkeyed tasks than it asked for), 0
	// after one that did not: while Pokes stays there, a claim would find
	// nothing (see IsDrained).
	drained atomic.Uint64
}

// ClaimersFor is how many claim loops a queue of n slots runs. A claim
// statement takes tens of milliseconds for hundreds of rows, most of it
// waiting on PostgreSQL; with one loop the next claim waits for the last
// one, with two they overlap. Small queues gain nothing from it.
func ClaimersFor(n int) int {
	if n < 64 {
		return 1
	}
	return 2
}

// NewQueue returns the queue name of n slots, its executions of type E.
func NewQueue[E any](name string, n int) *Queue[E] {
	q := &Queue[E]{Name: name, Size: n, done: make(chan struct{}), exited: make(chan struct{})}
	for range ClaimersFor(n) {
		q.wakes = append(q.wakes, make(chan struct{}, 1))
	}
	q.Slots = slots.New[E](n, q.Poke)
	return q
}

// Poke asks a claim loop to look for work now: one, in turn, since one
// claim takes all a poke announces up to its share of the slots; a claim
// that fills its share wakes the others (see claimLoops). Waking every
// claimer had the others run a claim that found nothing.
func (q *Queue[E]) Poke() {
	n := q.Pokes.Add(1)
	q.wakeClaimer(int(n % uint64(len(q.wakes))))
}

// PokeOthers wakes every claim loop but claimer i.
func (q *Queue[E]) PokeOthers(i int) {
	q.Pokes.Add(1)
	for j := range q.wakes {
		if j != i {
			q.wakeClaimer(j)
		}
	}
}

// wakeClaimer wakes claim loop i (at once if it waits, else after the
// claim it is making).
func (q *Queue[E]) wakeClaimer(i int) {
	select {
	case q.wakes[i] <- struct{}{}:
	default:
	}
}

// ClaimEnded records what a claim that began when the pokes count was
// before found: the queue empty (it got fewer unkeyed tasks than it
// asked for, and no cap held it back), or not.
func (q *Queue[E]) ClaimEnded(before uint64, empty bool) {
	if empty {
		q.drained.Store(before + 1)
	} else {
		q.drained.Store(0)
	}
}

// IsDrained reports whether the queue's last claim found it empty and
// nothing has announced work since, with the pokes count that claim began
// at. A task made ready commits with a NOTIFY, which pokes; one that only
// comes due (a retry's backoff, a run enqueued for later) is the poll's.
func (q *Queue[E]) IsDrained() (uint64, bool) {
	d := q.drained.Load()
	return d - 1, d != 0 && d-1 == q.Pokes.Load()
}

// Stop stops claiming: the claim loops return, BeginClaim refuses.
// Safe twice.
func (q *Queue[E]) Stop() {
	q.stopMu.Lock()
	defer q.stopMu.Unlock()
	q.stopOnce.Do(func() { close(q.done) })
}

// BeginClaim registers a claim made outside the claim loops (a completion
// write claiming along) unless the queue has stopped; Shutdown waits for
// those as for the claim loops, so that every task claimed is started
// before the handlers are counted. End it with EndClaim.
func (q *Queue[E]) BeginClaim() bool {
	q.stopMu.Lock()
	defer q.stopMu.Unlock()
	if q.Stopped() {
		return false
	}
	q.claiming.Add(1)
	return true
}

// Tick waits for t and reports whether it fired before ctx ended or the
// queue stopped claiming.
func (q *Queue[E]) Tick(ctx context.Context, t *time.Timer) bool {
	select {
	case <-ctx.Done():
		return false
	case <-q.done:
		return false
	case <-t.C:
		return true
	}
}

// Stopped reports whether the queue has stopped claiming.
func (q *Queue[E]) Stopped() bool {
	select {
	case <-q.done:
		return true
	default:
		return false
	}
}

// ClaimCap is the most one claim takes: a share of the slots (half of
// them below 16), so that several batches are in flight, some being
// claimed while others are being completed. With one batch the size of
// all slots, claim and completion would take turns and each wait for the
// other; with two halves, one half runs while the other's completion
// write (which claims its next tasks) commits.
func (q *Queue[E]) ClaimCap() int {
	if q.Size < 16 {
		return max(1, q.Size/2)
	}
	parts := 2 * len(q.wakes)
	return (q.Size + parts - 1) / parts
}

// ClaimsOnPark reports whether a park write may claim new work of the
// queue for the slots it frees, in its own transaction: the queue is
// claiming, uncapped (a cap is checked by the claim loop's own statement),
// and no deferred task waits for a slot (those come first).
func (q *Queue[E]) ClaimsOnPark() bool {
	if q.Stopped() || q.Capped.Load() {
		return false
	}
	return q.Slots.Waiting() == 0
}

// Wakes are the wake-up channels of the queue's claim loops, one each.
func (q *Queue[E]) Wakes() []chan struct{} { return q.wakes }

// Done is closed when the queue stops claiming.
func (q *Queue[E]) Done() <-chan struct{} { return q.done }

// EndClaim ends a claim begun with BeginClaim.
func (q *Queue[E]) EndClaim() { q.claiming.Done() }

// Go runs the queue's claim loops (run) in a goroutine, once.
func (q *Queue[E]) Go(run func()) {
	if q.began.CompareAndSwap(false, true) {
		go func() {
			defer close(q.exited)
			run()
		}()
	}
}

// StopAndWait stops claiming and returns once the claim loops (if Go
// ran them) and the claims begun with BeginClaim have ended.
func (q *Queue[E]) StopAndWait() {
	q.Stop()
	if q.began.Load() {
		<-q.exited
	}
	q.claiming.Wait()
}
