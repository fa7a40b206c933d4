package producer

import (
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine/internal/completer"
	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/engine/internal/slots"
	"github.com/cairnhq/cairn/store"
)

// Execution is an engine's execution as the queues see it: the
// executor's state and the queue whose slot it holds.
type Execution[E any] interface {
	Exec() *executor.Execution
	Queue() *Queue[E]
}

// AlongConfig builds an Along.
type AlongConfig[E Execution[E]] struct {
	// Queues are the engine's queues; the claims along are made for them
	// as worker, with lease, keyed while Keyed is set.
	Queues   Queues[E]
	WorkerID int64
	Lease    time.Duration
	Keyed    *atomic.Bool
	// Start starts an execution of the row c, claimed along for q, which
	// holds one of q's slots.
	Start func(q *Queue[E], c store.Claimed)
	// Forget forgets the execution of task id: its last write committed.
	Forget func(id int64)
	// Lost is the error given to a deferred task handed a slot whose
	// resume the write did not make (its row is no longer this worker's).
	Lost error
}

// Along is the queues' side of a completion write (see
// completer.Producer): the slots a batch frees go first to deferred tasks
// waiting for one (FIFO), whose rows the write moves deferred -> running
// (see slots.Waiter), so a deferred task comes back without a write of
// its own; the write claims the next tasks for the others. After the
// commit the rows claimed along are started (AlongConfig.Start) on the
// writer's goroutine, and the slots left released.
type Along[E Execution[E]] struct{ cfg AlongConfig[E] }

// NewAlong returns the queues' side of completion writes.
func NewAlong[E Execution[E]](cfg AlongConfig[E]) *Along[E] { return &Along[E]{cfg: cfg} }

// WritePlan is what the queues keep of one completion write, from its
// plan to its commit (see Along).
type WritePlan[E any] struct {
	freed  map[*Queue[E]]int
	handed map[*Queue[E]][]*slots.Waiter[E]
	ask    claimAsk[E]
	// quietSince[q]: q's freed slots are released without waking a claim
	// loop if its pokes count is still this (see Written).
	quietSince map[*Queue[E]]uint64
}

type along[E Execution[E]] = completer.Along[E, WritePlan[E]]

// Plan takes the slots batch frees, hands some to deferred tasks waiting
// for one and asks for claims for the others (see completer.Producer).
func (s *Along[E]) Plan(batch []completer.Completion[E], releases bool, a *along[E]) {
	// The batch's slots are the completer's from here: a park write that
	// commits meanwhile (a handler that gave up waiting for it) must not
	// release them as well.
	freed := map[*Queue[E]]int{}
	for _, b := range batch {
		if b.Ex.Exec().HoldsSlot.Swap(false) {
			freed[b.Ex.Queue()]++
		}
	}
	// Deferred tasks waiting for a slot come first: the write moves their
	// rows deferred -> running.
	handed := map[*Queue[E]][]*slots.Waiter[E]{}
	for q, n := range freed {
		if ws := q.Slots.HandOff(n); len(ws) > 0 {
			handed[q] = ws
			freed[q] -= len(ws)
			for _, w := range ws {
				a.Resume = append(a.Resume, w.Item)
			}
		}
	}
	// Where nobody waits for the slots left, the write claims their next
	// tasks in its own transaction: one commit finishes a batch and starts
	// the next, and the database never shows more running tasks than
	// slots, as the finished rows leave running in the same transaction.
	ask := claimAlong(freed, releases)
	a.Total = ask.total
	a.State = WritePlan[E]{freed: freed, handed: handed, ask: ask, quietSince: ask.drained}
}

// ClaimParams are the parameters of a's claim (see completer.Producer).
func (s *Along[E]) ClaimParams(a *along[E]) store.ClaimParams {
	return s.cfg.Queues.ClaimParams(s.cfg.WorkerID, s.cfg.Lease, s.cfg.Keyed.Load(), a.State.ask.begun, a.State.ask.limits)
}

// ClaimFailed ends a's claims after its write failed with err (see
// completer.Producer).
func (s *Along[E]) ClaimFailed(a *along[E], p store.ClaimParams, err error) {
	s.cfg.Queues.AfterClaim(p, nil, err)
	for _, q := range a.State.ask.begun {
		q.EndClaim()
	}
	a.State.ask = claimAsk[E]{}
}

// Written forgets the batch's executions, resumes the deferred tasks
// handed a slot (or tells them they are lost), starts the rows claimed
// along and releases the slots left (see completer.Producer).
func (s *Along[E]) Written(batch []completer.Completion[E], a *along[E], claim store.ClaimParams, claimed []store.Claimed, resumed map[int64]bool) {
	st := &a.State
	ask, freed, quietSince := st.ask, st.freed, st.quietSince
	for _, b := range batch {
		s.cfg.Forget(b.Ex.Exec().Task.ID)
	}
	// Hand the slots on; the claimed tasks take over others; the rest are
	// released per queue in one go, so the claim loop wakes once and
	// claims a batch as large as what is left.
	for _, ws := range st.handed {
		for _, w := range ws {
			x := w.Item.Exec()
			x.HoldsSlot.Store(true)
			var err error
			if !resumed[x.Task.ID] {
				err = s.cfg.Lost
			}
			w.Done(err)
		}
	}
	byQueue := map[string]*Queue[E]{}
	for q := range freed {
		byQueue[q.Name] = q
	}
	s.cfg.Queues.AfterClaim(claim, claimed, nil)
	for _, t := range claimed {
		q := byQueue[t.Queue]
		freed[q]--
		s.cfg.Start(q, t)
	}
	// A queue claimed along for took every ready task the write could
	// see, up to what it asked (a keyed claim takes a share per key and
	// may leave more): one that got fewer is empty.
	if len(ask.begun) > 0 && !claim.Keyed {
		for _, q := range ask.begun {
			q.ClaimEnded(ask.before[q], freed[q] > 0)
			if freed[q] > 0 {
				quietSince[q] = ask.before[q]
			}
		}
	}
	for q, n := range freed {
		if since, ok := quietSince[q]; ok && n > 0 && q.Pokes.Load() == since {
			// The queue was found empty (by this write's claim or one
			// before it) and nothing announced work since: a claim loop
			// woken now would find nothing either.
			q.Slots.ReleaseQuiet(n)
			continue
		}
		q.Slots.Release(n)
	}
	for _, q := range ask.begun {
		q.EndClaim()
	}
}

// claimAsk is what a completion write claims along: queue names and how
// many tasks of each.
type claimAsk[E any] struct {
	names  []string
	limits []int
	total  int
	begun  []*Queue[E] // BeginClaim succeeded: end each with EndClaim
	// before is each begun queue's pokes count as the ask was made;
	// drained are the queues not asked because their last claim found
	// them empty, with the pokes count that claim began at.
	before, drained map[*Queue[E]]uint64
}

// claimAlong decides how many tasks the completion write that frees
// freed slots claims in its transaction: a queue's freed slots, unless
// the queue stops claiming, is capped (its cap is counted under a lock
// by the claim loop), or has deferred tasks waiting for a slot (they come
// first). Nor, unless the write releases dependents (which it could
// claim), does it claim for a queue whose last claim found it empty with
// nothing announced since.
func claimAlong[E any](freed map[*Queue[E]]int, releases bool) claimAsk[E] {
	ask := claimAsk[E]{before: map[*Queue[E]]uint64{}, drained: map[*Queue[E]]uint64{}}
	for q, n := range freed {
		if n <= 0 || q.Capped.Load() || q.Slots.Waiting() > 0 {
			continue
		}
		if since, ok := q.IsDrained(); ok && !releases {
			ask.drained[q] = since
			continue
		}
		if !q.BeginClaim() {
			continue
		}
		ask.begun = append(ask.begun, q)
		ask.before[q] = q.Pokes.Load()
		ask.names = append(ask.names, q.Name)
		ask.limits = append(ask.limits, n)
		ask.total += n
	}
	return ask
}
