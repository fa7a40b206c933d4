// Package producer claims: per queue, a Producer runs the claim loops
// (one or two, on package claim) and the refreshes of the queue's claim
// floor and keyed floor, and starts an execution for each row claimed.
// Queue holds a queue's state (slots, wake-ups, what its last claim
// found, its floors: see engine/internal/README.md, "Claim floors"),
// Queues the parameters of a claim over several queues and what it took,
// for the producers, the completer's claims along and park writes alike.
// Along is the queues' side of each completion write: it hands freed
// slots to deferred tasks, asks for claims along, and starts the rows
// claimed along once the write committed.
package producer

import (
	"cmp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/store"
)

// FloorMargin is how far below the first task of its last claim a
// queue's next claims start (see store.ClaimFloor): a task made ready by
// a transaction that began up to this long before it committed is still
// seen by the next claim; an older one waits for the next floor refresh.
// The claim walks the index entries of the tasks claimed in the margin.
// Those are cheap while vacuum can clean them; while a long transaction
// holds back the xmin, each costs a heap visit, and a second's worth of
// them (thousands) is most of what a claim costs. The floor refresh, which
// walks every entry below the floor, tells the two apart: after one that
// took FloorSlowRead or more, the margin is FloorMarginHeld.
const (
	FloorMargin     = time.Second
	FloorMarginHeld = 200 * time.Millisecond
	FloorSlowRead   = 25 * time.Millisecond
)

// FloorRefreshPolls is how many poll intervals pass between two reads of
// a queue's lowest claimable task, which lower its floor to it (10 s by
// default): how long a task made ready below the floor (a run resumed
// from a pause, a transaction that committed long after it began, a claim
// rolled back) may wait. A read that takes long (the walk of entries a
// held-back xmin keeps) spaces the next one out to FloorRefreshCost times
// its time, so the reads take at most 1/FloorRefreshCost of a connection.
const (
	FloorRefreshPolls = 10
	FloorRefreshCost  = 40
)

// Floor is where a queue's claims start in claim order: a little
// below the lowest task its last claim took, lowered on each refresh to
// the lowest task a claim could take, and back to the start after a
// failed write (see store.ClaimFloor). The zero Floor is at the
// start.
type Floor struct {
	mu     sync.Mutex
	at     store.ClaimFloor
	margin time.Duration // below a claim's first task; 0: FloorMargin
}

// SetMargin sets how far below the first task of a claim the floor
// rises to.
func (f *Floor) SetMargin(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.margin = d
}

func (f *Floor) Get() store.ClaimFloor {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}

// Raise moves the floor up to the margin (FloorMargin by default) below
// first, the lowest task of a claim that scanned from from. Such a claim
// saw every claimable task from its start on, so nothing it did not take
// lies between (bar tasks other claims had locked, which they take). A
// claim that started above the floor (it was lowered since) proves
// nothing and changes nothing.
func (f *Floor) Raise(from, first store.ClaimFloor) {
	f.mu.Lock()
	defer f.mu.Unlock()
	first.At = first.At.Add(-cmp.Or(f.margin, FloorMargin))
	if !FloorBelow(f.at, from) && FloorBelow(f.at, first) {
		f.at = first
	}
}

// Lower moves the floor down to to, if it is below, and reports whether
// it moved.
func (f *Floor) Lower(to store.ClaimFloor) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if FloorBelow(to, f.at) {
		f.at = to
		return true
	}
	return false
}

// Reset moves the floor back to the start.
func (f *Floor) Reset() { f.Lower(store.ClaimFloor{}) }

// FloorBelow reports whether a comes before b in claim order; the zero
// floor (the start) comes before any other.
func FloorBelow(a, b store.ClaimFloor) bool {
	switch {
	case b.At.IsZero():
		return false
	case a.At.IsZero():
		return true
	case a.Priority != b.Priority:
		return a.Priority < b.Priority
	}
	return a.At.Before(b.At)
}

// KeyedFloor is where a queue's keyed claims start (see
// store.ClaimParams.KeyedFloors): the margin below the least
// available_at of the keyed tasks they could take, as its last read found
// it (see the engine's refreshKeyedFloor), in microseconds since the Unix epoch; 0 is
// the start. Claims cannot raise it: they take turns across keys and do
// not know that the keys they did not visit hold nothing older.
type KeyedFloor struct{ at atomic.Int64 }

func (f *KeyedFloor) Get() time.Time {
	if us := f.at.Load(); us != 0 {
		return time.UnixMicro(us)
	}
	return time.Time{}
}

// Move sets the floor to to if it is still at from, and reports whether
// it did: a read that began before a reset does not undo it.
func (f *KeyedFloor) Move(from, to time.Time) bool {
	var a, b int64
	if !from.IsZero() {
		a = from.UnixMicro()
	}
	if !to.IsZero() {
		b = to.UnixMicro()
	}
	return f.at.CompareAndSwap(a, b)
}

// Reset moves the floor back to the start.
func (f *KeyedFloor) Reset() { f.at.Store(0) }

// MarginFor is the floor margin after a floor refresh that took
// took: FloorMarginHeld after a slow one, FloorMargin otherwise.
func MarginFor(took time.Duration) time.Duration {
	if took >= FloorSlowRead {
		return FloorMarginHeld
	}
	return FloorMargin
}
