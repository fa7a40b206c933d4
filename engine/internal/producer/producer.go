package producer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/claim"
	"github.com/cairnhq/cairn/store"
)

// Store is what a producer reads and claims with.
type Store interface {
	QueueGet(ctx context.Context, name string) (*store.Queue, error)
	TaskClaim(ctx context.Context, p store.ClaimParams) ([]store.Claimed, error)
	TaskClaimCapped(ctx context.Context, p store.ClaimParams) ([]store.Claimed, error)
	TaskClaimFloor(ctx context.Context, queue string, workerID int64) (store.ClaimFloor, bool, error)
	TaskKeyedFloor(ctx context.Context, queue string, workerID int64, from time.Time) (time.Time, error)
}

// Config builds a Producer.
type Config[E any] struct {
	Store Store
	// Queues are the engine's queues (a claim's parameters read them),
	// Queue the one this producer claims for.
	Queues   Queues[E]
	Queue    *Queue[E]
	WorkerID int64
	Lease    time.Duration // of the tasks claimed
	Poll     time.Duration // the claim loops' poll interval
	// Keyed is set while a registered task has a flow limit: claims take
	// keyed tasks.
	Keyed  *atomic.Bool
	Clock  func() time.Time
	Health *backoff.Health
	// Start starts an execution of a claimed row, which holds one of the
	// queue's slots.
	Start func(c store.Claimed)
	// OnClaim observes each claim statement (tracing): from start, asked
	// for asked rows of queue; OnClaimed each that succeeded (metrics),
	// with how many rows it claimed.
	OnClaim   func(start time.Time, queue string, asked int, claimed []store.Claimed, err error)
	OnClaimed func(start time.Time, n int)
}

// Producer claims the tasks of one queue: its claim loops (one or two,
// see ClaimersFor) wait for a wake-up (see Queue.Poke) or the poll, claim
// up to their share of the free slots and start the rows claimed; two
// more loops refresh the queue's claim floor and keyed floor.
type Producer[E any] struct{ cfg Config[E] }

// New returns a producer; Start runs it.
func New[E any](cfg Config[E]) *Producer[E] { return &Producer[E]{cfg: cfg} }

// Start runs the claim loops and returns at once.
func (pr *Producer[E]) Start(ctx context.Context) error {
	pr.cfg.Queue.Go(func() { pr.run(ctx) })
	return nil
}

// Stop stops claiming and returns once the claims in flight ended, those
// begun outside the claim loops (Queue.BeginClaim: completion writes
// claiming along) included. Safe twice or before Start.
func (pr *Producer[E]) Stop() { pr.cfg.Queue.StopAndWait() }

// run runs the queue's claimers (see claim.Loop) and its floor
// refreshes until the queue stops.
func (pr *Producer[E]) run(ctx context.Context) {
	q := pr.cfg.Queue
	RefreshCap(ctx, pr.cfg.Store, pr.cfg.Health, q)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); pr.refreshFloors(ctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); pr.refreshKeyedFloor(ctx) }()
	for i, wake := range q.Wakes() {
		wg.Add(1)
		var buf []store.Claimed // this loop's claims are read into it
		l := &claim.Loop{Name: "claim:" + q.Name, Poll: pr.cfg.Poll, Health: pr.cfg.Health,
			Claim: func(ctx context.Context) (int, int, error) { return pr.RunOnce(ctx, &buf) },
			// Every slot asked for was filled, or a keyed claim (which
			// takes a share of its keys' tasks per claim) found some: more
			// may wait, for the other claimers too.
			More: func(asked, got int) bool {
				more := got == asked || pr.cfg.Keyed.Load()
				if more {
					q.PokeOthers(i)
				}
				return more
			},
			Refresh: func(ctx context.Context) { RefreshCap(ctx, pr.cfg.Store, pr.cfg.Health, q) }}
		go func() { defer wg.Done(); l.Run(ctx, q.Done(), wake) }()
	}
	wg.Wait()
}

// RefreshCap reads whether q has a cap on its running tasks. A failed
// read leaves q marked capped (a capped claim counts the cap under a
// lock, so it is right either way) and stale: the next claim reads it
// again. Failures are reported through health, once per run of them
// (loop "cap:QUEUE").
func RefreshCap[E any](ctx context.Context, st Store, health *backoff.Health, q *Queue[E]) {
	row, err := st.QueueGet(ctx, q.Name)
	if err != nil {
		q.Capped.Store(true)
		q.CapStale.Store(true)
		if ctx.Err() == nil {
			health.Loop("cap:"+q.Name).Fail(ctx, fmt.Errorf("read the cap of queue %s: %w", q.Name, err))
		}
		return
	}
	q.Capped.Store(row.MaxRunning != nil)
	q.CapStale.Store(false)
	health.Loop("cap:" + q.Name).OK(ctx)
}

// RunOnce claims up to the free slots and starts the handlers. It
// returns how many tasks it asked for (0: no free slot, nothing was
// queried) and how many it got. A failed claim gives its slots back
// without waking the claim loops: the caller backs off first. The rows
// are read into *buf, kept for the next claim (see store.ClaimParams.Buf).
func (pr *Producer[E]) RunOnce(ctx context.Context, buf *[]store.Claimed) (asked, got int, err error) {
	q := pr.cfg.Queue
	select {
	case <-q.Done():
		return 0, 0, nil
	default:
	}
	n := q.Slots.TryAcquireUpTo(q.ClaimCap())
	if n == 0 {
		return 0, 0, nil
	}
	q.Claims.Add(1)
	if q.CapStale.Load() { // the last read of the cap failed
		RefreshCap(ctx, pr.cfg.Store, pr.cfg.Health, q)
	}
	before := q.Pokes.Load()
	capped := q.Capped.Load()
	start := pr.cfg.Clock()
	var claimed []store.Claimed
	p := pr.cfg.Queues.ClaimParams(pr.cfg.WorkerID, pr.cfg.Lease, pr.cfg.Keyed.Load(), []*Queue[E]{q}, []int{n})
	p.Buf = *buf
	if capped {
		claimed, err = pr.cfg.Store.TaskClaimCapped(ctx, p)
	} else {
		claimed, err = pr.cfg.Store.TaskClaim(ctx, p)
	}
	pr.cfg.OnClaim(start, q.Name, n, claimed, err)
	pr.cfg.Queues.AfterClaim(p, claimed, err)
	if err != nil {
		claim.KeepBuf(buf, nil)
		q.Slots.ReleaseQuiet(n)
		return n, 0, fmt.Errorf("claim tasks of queue %q: %w", q.Name, err)
	}
	pr.cfg.OnClaimed(start, len(claimed))
	q.ClaimEnded(before, !p.Keyed && !capped && len(claimed) < n)
	q.Slots.ReleaseQuiet(n - len(claimed))
	for _, c := range claimed {
		pr.cfg.Start(c)
	}
	claim.KeepBuf(buf, claimed)
	return n, len(claimed), nil
}

// refreshFloors lowers the queue's claim floor every
// FloorRefreshPolls poll intervals (or longer, see
// FloorRefreshCost) to its lowest claimable task, so that a task
// made ready below it is claimed, and sets the floor's margin from the
// read's time (see FloorMargin), until the queue stops claiming.
func (pr *Producer[E]) refreshFloors(ctx context.Context) {
	q := pr.cfg.Queue
	every := FloorRefreshPolls * pr.cfg.Poll
	t := time.NewTimer(every)
	defer t.Stop()
	for q.Tick(ctx, t) {
		if q.Floor.Get().At.IsZero() {
			t.Reset(every)
			continue
		}
		began := pr.cfg.Clock()
		f, ok, err := pr.cfg.Store.TaskClaimFloor(ctx, q.Name, pr.cfg.WorkerID)
		took := pr.cfg.Clock().Sub(began)
		t.Reset(max(every, FloorRefreshCost*took))
		// A failure leaves the floor: the claims report the outage and
		// reset it themselves.
		if err != nil {
			continue
		}
		q.Floor.SetMargin(MarginFor(took))
		if ok && q.Floor.Lower(f) {
			q.Poke()
		}
	}
}

// refreshKeyedFloor keeps the queue's keyed floor (see
// KeyedFloor) while the engine claims keyed tasks. Every
// FloorRefreshPolls poll intervals it reads from the start (see
// readKeyedFloor), which lowers the floor to a task made ready below it
// and sets the margin (see MarginFor). After such a read took
// long (a held-back xmin keeps the entries below the floor, see
// FloorSlowRead) it also reads every poll interval from the
// floor on, which raises the floor past the tasks claimed since, so that
// claims do not walk their entries. A read that takes long spaces the
// next of its kind out to FloorRefreshCost times its time.
func (pr *Producer[E]) refreshKeyedFloor(ctx context.Context) {
	q := pr.cfg.Queue
	poll := pr.cfg.Poll
	t := time.NewTimer(poll)
	defer t.Stop()
	var fullDue time.Time // when the next read from the start is due
	margin := FloorMargin
	for q.Tick(ctx, t) {
		began := pr.cfg.Clock()
		full := !began.Before(fullDue)
		held := margin == FloorMarginHeld // the last read from the start was slow
		if !pr.cfg.Keyed.Load() || (!full && !held) {
			t.Reset(poll)
			continue
		}
		err := ReadKeyedFloor(ctx, pr.cfg.Store, pr.cfg.WorkerID, q, full, margin)
		took := pr.cfg.Clock().Sub(began)
		if !full {
			t.Reset(max(poll, FloorRefreshCost*took))
			continue
		}
		fullDue = began.Add(max(FloorRefreshPolls*poll, FloorRefreshCost*took))
		t.Reset(poll)
		// A failure leaves the floor and the margin: the claims report the
		// outage and reset the floor themselves.
		if err == nil {
			margin = MarginFor(took)
		}
	}
}

// ReadKeyedFloor reads the least available_at of the queue's keyed tasks
// this worker could claim (see store.TaskKeyedFloor) and moves the keyed
// floor to margin below it: from the start when full (it may then lower
// the floor), else from the floor on (it only raises it). A floor reset
// while it read stays reset. A lowered floor wakes the claimers.
func ReadKeyedFloor[E any](ctx context.Context, st Store, worker int64, q *Queue[E], full bool, margin time.Duration) error {
	cur := q.KeyedFloor.Get()
	from := cur
	if full {
		from = time.Time{}
	}
	at, err := st.TaskKeyedFloor(ctx, q.Name, worker, from)
	if err != nil {
		return err
	}
	to := at.Add(-margin)
	if !full && to.Before(cur) {
		to = cur
	}
	if q.KeyedFloor.Move(cur, to) && to.Before(cur) {
		q.Poke()
	}
	return nil
}
