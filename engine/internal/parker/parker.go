// Package parker parks and resumes tasks for DeferUntil and the durable
// waits. A park's two writes, running -> deferred and (once the task's
// slot is re-acquired) deferred -> running, go through a writer each,
// batched as the completer batches finished attempts (on package batch;
// most resumes ride on a completion write instead, see slots.Waiter; and
// a park write claims new work for the slots it frees in its own
// transaction, see store.TaskDeferAndClaim): a handler submits its task
// and waits for its own answer (moved, or lost to a cancel or rescue),
// and the writer commits what has queued in one statement and
// transaction. Ten thousand tasks that park at once cost tens of
// statements, not ten thousand. While parked, a task waits on its signal
// channel only; one shared timer (timers.Wakeups) sends on it when its
// interval elapses.
package parker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/batch"
	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/engine/internal/outcome"
	"github.com/cairnhq/cairn/engine/internal/producer"
	"github.com/cairnhq/cairn/engine/internal/timers"
	"github.com/cairnhq/cairn/store"
)

// Store is what the park and resume writers write with.
type Store interface {
	Transition(ctx context.Context, p store.TransitionParams) ([]store.Moved, error)
	TaskParkAndClaimOne(ctx context.Context, p store.TransitionParams, claim store.ClaimParams) (moved []store.Moved, claimed []store.Claimed, err error)
	TaskDeferAndClaim(ctx context.Context, p store.TaskDeferClaimParams) (moved []store.Moved, claimed []store.Claimed, err error)
	TaskResumeBatch(ctx context.Context, p store.TaskResumeParams) ([]store.Moved, error)
	TaskResumeKeyed(ctx context.Context, workerID int64, task store.ResumeTask, lease time.Duration) (moved, full bool, err error)
}

// Exec is an engine's execution: the executor's state inside it, and the
// queue whose slot it holds.
type Exec[E any] interface {
	Exec() *executor.Execution
	Queue() *producer.Queue[E]
}

// Config builds a Parker.
type Config[E Exec[E]] struct {
	Store    Store
	WorkerID int64
	Lease    time.Duration // of the tasks moved back to running
	Max      int           // the most tasks in one write
	// Queues are the engine's queues: a park write claims for the slots
	// it frees (see producer.Queues.AfterClaim).
	Queues producer.Queues[E]
	// Keyed reports whether claims take keyed tasks (a registered task
	// has a flow limit).
	Keyed func() bool
	// Held counts the slots held across queues (see completer.Config):
	// a write waits for more while more are held than it has gathered.
	Held  func() int
	Clock func() time.Time
	// Health logs failed writes (once per outage) and paces retries.
	Health *backoff.Health
	// Wakeups is the shared interval timer of parked tasks.
	Wakeups *timers.Wakeups
	// Start starts the execution of a row a park write claimed with the
	// slot of q a parked task freed.
	Start func(q *producer.Queue[E], c store.Claimed)
	// Settled records the failure of a park or resume write on the
	// execution (a lost row, or a state unknown).
	Settled func(x E, err error)
	// Lost answers a task whose row was no longer this attempt's;
	// Stopped a request made after Stop (it should wrap Lost).
	Lost, Stopped error
	// OnWrite observes each attempt at a write (tracing): op ("park",
	// "resume") from start, of the executions exs, with the rows it
	// claimed.
	OnWrite func(start time.Time, op string, exs []E, claimed []store.Claimed, err error)
	// OnCommit observes each committed write (metrics): its moves and
	// how many rows it claimed.
	OnCommit func(moved []store.Moved, claimed int)
}

// Writers is how many batches one writer has in flight at once (see
// completer.Writers).
const Writers = 2

// waitMax bounds the wait between two tries of a keyed task to resume
// while its key is full.
const waitMax = 2 * time.Second

// Parker writes parks and resumes in batches: Start runs its two
// writers, Stop writes what was submitted and stops them.
type Parker[E Exec[E]] struct {
	cfg            Config[E]
	parks, resumes *writer[E]
}

// New returns a parker; Start runs it.
func New[E Exec[E]](cfg Config[E]) *Parker[E] {
	p := &Parker[E]{cfg: cfg}
	p.parks = p.newWriter("park", p.writeParks)
	p.parks.releaseSlots = true
	p.resumes = p.newWriter("resume", p.writeResumes)
	return p
}

// Start runs the writers' batches and returns at once.
func (p *Parker[E]) Start(ctx context.Context) error {
	_ = p.parks.Start(ctx)
	return p.resumes.Start(ctx)
}

// Stop writes what was submitted and stops the writers; later requests
// get Config.Stopped. Safe twice or before Start.
func (p *Parker[E]) Stop() {
	p.parks.Stop()
	p.resumes.Stop()
}

// Writes returns how many statements the park and the resume writer
// committed, for tests.
func (p *Parker[E]) Writes() (park, resume int64) {
	return p.parks.batches.Load(), p.resumes.batches.Load()
}

// ClaimedOnPark returns how many tasks park writes claimed for the slots
// they freed, for tests.
func (p *Parker[E]) ClaimedOnPark() int64 { return p.parks.claimed.Load() }

// Park moves x's row running -> deferred, storing wait as the task's
// durable wait, or, when wait is nil, every as the interval of the
// DeferUntil condition it parks in (durable waits store no interval:
// their rows say what they wait for instead), and gives back its slot.
// It returns ctx's error when ctx ended before the write, and an error
// wrapping Config.Lost when the row was no longer this attempt's (the
// failure recorded with Config.Settled). It does not return while its
// write may still commit (the writer answers a request whose ctx ended
// at its next try), so that nothing else touches the execution's slot
// meanwhile.
func (p *Parker[E]) Park(ctx context.Context, x E, wait *store.Wait, every time.Duration) error {
	if err := p.parks.submit(ctx, x, wait, every); err != nil {
		p.cfg.Settled(x, err)
		return fmt.Errorf("defer task: %w", err)
	}
	x.Exec().Parked.Store(true)
	return nil
}

// Wait waits for a parked x: check runs after every (its last answer's
// interval after that) and at every signal, until it reports done (nil)
// or fails (its error), or ctx ends (ctx's error).
func (p *Parker[E]) Wait(ctx context.Context, x E, every time.Duration,
	check func(context.Context) (done bool, next time.Duration, err error)) error {
	wakeups, ex := p.cfg.Wakeups, x.Exec()
	wk := wakeups.Add(ex.Signal, every)
	for {
		select {
		case <-ctx.Done():
			wakeups.Remove(wk)
			return ctx.Err()
		case <-ex.Signal:
		}
		done, next, err := check(ctx)
		if err != nil {
			wakeups.Remove(wk)
			return err
		}
		if done {
			break
		}
		if next > 0 && next != wk.Every() {
			wakeups.Remove(wk)
			wk = wakeups.Add(ex.Signal, next)
		}
	}
	wakeups.Remove(wk)
	return nil
}

// Resume re-acquires a slot for a parked x and moves its row back to
// running.
func (p *Parker[E]) Resume(ctx context.Context, x E) error {
	ex, q := x.Exec(), x.Queue()
	if ex.Task.ConcKey != nil {
		// Its key's place was given back at the park: it is taken again
		// only where the key has room.
		return p.resumeKeyed(ctx, x)
	}
	handed, err := q.Slots.AcquireFor(ctx, x)
	if handed != nil {
		// A completion write passed its slot on and resumed the row in
		// its own transaction (x holds the slot either way).
		if err != nil {
			ex.Unsure.Store(true) // resumed or not, as the handing write went
			return err
		}
		if err := handed.Err(); err != nil {
			p.cfg.Settled(x, err)
			return fmt.Errorf("resume task: %w", err)
		}
		ex.Parked.Store(false)
		return nil
	}
	if err != nil {
		return err
	}
	ex.HoldsSlot.Store(true)
	if err := p.resumes.submit(ctx, x, nil, 0); err != nil {
		p.cfg.Settled(x, err)
		return fmt.Errorf("resume task: %w", err)
	}
	ex.Parked.Store(false)
	return nil
}

// resumeKeyed re-acquires a slot and the key's place for a parked task
// with a concurrency key: its key may be full (others took the place it
// gave back), so it takes a plain slot (no hand-off: a completion write
// does not check keys), asks for the place, and while the key is full
// gives the slot back and tries again after a jittered backoff or a
// signal.
func (p *Parker[E]) resumeKeyed(ctx context.Context, x E) error {
	cfg := &p.cfg
	ex, q := x.Exec(), x.Queue()
	var bo *backoff.Backoff
	for {
		if err := q.Slots.Acquire(ctx); err != nil {
			return err
		}
		ex.HoldsSlot.Store(true)
		moved, full, err := cfg.Store.TaskResumeKeyed(ctx, cfg.WorkerID, store.ResumeTask{ID: ex.Task.ID, Attempt: ex.Task.Attempt}, cfg.Lease)
		switch {
		case err != nil:
			cfg.Settled(x, err)
			return fmt.Errorf("resume task: %w", err)
		case moved:
			ex.Parked.Store(false)
			return nil
		case !full:
			cfg.Settled(x, cfg.Lost)
			return fmt.Errorf("resume task: %w", cfg.Lost)
		}
		if ex.HoldsSlot.Swap(false) {
			q.Slots.Release(1)
		}
		if bo == nil {
			bo = backoff.New(rand.Float64)
		}
		wait := min(bo.Next(), waitMax)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-ex.Signal:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// request is one handler's request to a writer.
type request[E Exec[E]] struct {
	x    E
	wait *store.Wait // the durable wait a park stores, if any
	// every is the interval of the DeferUntil condition a park stores
	// when it is in no durable wait (0: none), since when it parked.
	every time.Duration
	since time.Time
	ctx   context.Context
	reply chan error // buffered: the writer never blocks on it
}

// writer batches one kind of write (see batch.Writer).
type writer[E Exec[E]] struct {
	p    *Parker[E]
	name string // loop name, for the health tracker and logs
	// write commits a batch and returns the moves that took place, and the
	// tasks claimed in the same transaction for the slots parking freed.
	write func(ctx context.Context, batch []*request[E]) ([]store.Moved, []store.Claimed, error)
	// releaseSlots gives back the slots of moved tasks (parking).
	releaseSlots bool
	health       *backoff.Loop
	batcher      *batch.Writer[*request[E]]

	batches atomic.Int64 // statements committed, for tests
	claimed atomic.Int64 // tasks claimed by park writes, for tests
}

// writeParks moves a batch's rows running -> deferred and claims, in the
// same statement or transaction, as many tasks as it frees slots of
// queues that claim on park (see producer.Queue.ClaimsOnPark).
func (p *Parker[E]) writeParks(ctx context.Context, batch []*request[E]) ([]store.Moved, []store.Claimed, error) {
	cfg := &p.cfg
	items := make([]store.TransitionItem, len(batch))
	var queues []string
	seen := map[*producer.Queue[E]]bool{}
	for i, r := range batch {
		ex := r.x.Exec()
		items[i] = outcome.Parked(ex.Task.ID, ex.Task.Attempt, ex.RowState())
		if r.wait != nil {
			items[i].SetWait(r.wait)
		} else if r.every > 0 {
			items[i].SetCondition(r.every, r.since)
		}
		if q := r.x.Queue(); !seen[q] {
			seen[q] = true
			if q.ClaimsOnPark() {
				queues = append(queues, q.Name)
			}
		}
	}
	park := store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: cfg.WorkerID, Items: items}
	if len(queues) == 0 {
		moved, err := cfg.Store.Transition(ctx, park)
		return moved, nil, err
	}
	keyed := cfg.Keyed()
	cp := store.ClaimParams{Queues: queues, WorkerID: cfg.WorkerID, Lease: cfg.Lease, Keyed: keyed, Floors: cfg.Queues.Floors(queues)}
	if keyed {
		cp.After, cp.KeyedFloors = cfg.Queues.Turns(queues), cfg.Queues.KeyedFloors(queues)
	}
	var moved []store.Moved
	var claimed []store.Claimed
	var err error
	if !keyed && store.ParkClaimable(park) {
		// One statement, one commit: the parks and the claim of as many
		// tasks as they free.
		cp.Limits = make([]int, len(queues))
		for i, name := range queues {
			for _, r := range batch {
				if r.x.Queue().Name == name {
					cp.Limits[i]++
				}
			}
		}
		moved, claimed, err = cfg.Store.TaskParkAndClaimOne(ctx, park, cp)
	} else {
		moved, claimed, err = cfg.Store.TaskDeferAndClaim(ctx, store.TaskDeferClaimParams{Park: park, Queues: queues,
			Lease: cp.Lease, Keyed: keyed, After: cp.After, Floors: cp.Floors, KeyedFloors: cp.KeyedFloors})
	}
	cfg.Queues.AfterClaim(cp, claimed, err)
	return moved, claimed, err
}

// writeResumes moves a batch's rows deferred -> running.
func (p *Parker[E]) writeResumes(ctx context.Context, batch []*request[E]) ([]store.Moved, []store.Claimed, error) {
	tasks := make([]store.ResumeTask, len(batch))
	for i, r := range batch {
		ex := r.x.Exec()
		tasks[i] = store.ResumeTask{ID: ex.Task.ID, Attempt: ex.Task.Attempt}
	}
	moved, err := p.cfg.Store.TaskResumeBatch(ctx, store.TaskResumeParams{WorkerID: p.cfg.WorkerID, Tasks: tasks, Lease: p.cfg.Lease})
	return moved, nil, err
}

func (p *Parker[E]) newWriter(name string, write func(context.Context, []*request[E]) ([]store.Moved, []store.Claimed, error)) *writer[E] {
	cfg := &p.cfg
	w := &writer[E]{p: p, name: name, write: write, health: cfg.Health.Loop(name)}
	// A batch gathers while handlers that hold slots are still running:
	// those of one claimed batch reach DeferUntil close together.
	w.batcher = batch.New(batch.Config[*request[E]]{Max: cfg.Max, Writers: Writers, Write: w.flush,
		More: func(n int) bool { return cfg.Held() > n }, Clock: cfg.Clock})
	return w
}

// submit submits x's task and waits for the answer: nil when it moved,
// Config.Lost when its row was no longer this attempt's, ctx's error when
// ctx ended before the write, Config.Stopped after Stop. A park stores
// wait or every (see Park).
func (w *writer[E]) submit(ctx context.Context, x E, wait *store.Wait, every time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &request[E]{x: x, wait: wait, every: every, since: w.p.cfg.Clock(), ctx: ctx, reply: make(chan error, 1)}
	if err := w.batcher.Submit(r); err != nil {
		return w.p.cfg.Stopped
	}
	return <-r.reply
}

// Start runs the writer's batches and returns at once; Stop writes
// what was submitted and stops, safe twice or before Start; later
// submits get Config.Stopped (see batch.Writer).
func (w *writer[E]) Start(ctx context.Context) error { return w.batcher.Start(ctx) }

func (w *writer[E]) Stop() { w.batcher.Stop() }

// flush commits a batch, retrying with backoff while the database fails;
// requests whose handler context ended meanwhile are answered and left
// out.
func (w *writer[E]) flush(batch []*request[E]) {
	cfg := &w.p.cfg
	ctx := context.Background()
	var bo *backoff.Backoff // made at the first failure
	exs := make([]E, 0, len(batch))
	for {
		live := batch[:0]
		exs = exs[:0]
		for _, r := range batch {
			if err := r.ctx.Err(); err != nil {
				r.reply <- err
				continue
			}
			live = append(live, r)
			exs = append(exs, r.x)
		}
		batch = live
		if len(batch) == 0 {
			return
		}
		start := cfg.Clock()
		moved, claimed, err := w.write(ctx, batch)
		cfg.OnWrite(start, w.name, exs, claimed, err)
		if err == nil {
			w.health.OK(ctx)
			w.batches.Add(1)
			cfg.OnCommit(moved, len(claimed))
			w.claimed.Add(int64(len(claimed)))
			w.settle(batch, moved, claimed)
			return
		}
		w.health.Fail(ctx, fmt.Errorf("%s %d deferred tasks: %w", w.name, len(batch), err))
		if bo == nil {
			bo = backoff.New(rand.Float64)
		}
		cfg.Health.Wait(ctx, nil, bo.Next())
	}
}

// settle answers each request of a committed batch and, for parking,
// passes the slots of the moved tasks to the tasks claimed with them and
// gives back the rest, per queue in one go.
func (w *writer[E]) settle(batch []*request[E], moved []store.Moved, claimed []store.Claimed) {
	cfg := &w.p.cfg
	ok := make(map[int64]bool, len(moved))
	for _, m := range moved {
		ok[m.TaskID] = true
	}
	if w.releaseSlots {
		freed := map[*producer.Queue[E]]int{}
		for _, r := range batch {
			if ok[r.x.Exec().Task.ID] && r.x.Exec().HoldsSlot.Swap(false) {
				freed[r.x.Queue()]++
			}
		}
		for _, c := range claimed {
			q := cfg.Queues[c.Queue]
			freed[q]-- // the parked task's slot is the claimed one's
			cfg.Start(q, c)
		}
		for q, n := range freed {
			if n > 0 {
				q.Slots.Release(n)
			}
		}
	}
	for _, r := range batch {
		if ok[r.x.Exec().Task.ID] {
			r.reply <- nil
		} else {
			r.reply <- cfg.Lost
		}
	}
}
