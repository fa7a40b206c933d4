package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/batch"
	"github.com/cairnhq/cairn/engine/internal/outcome"
	"github.com/cairnhq/cairn/store"
)

// Parking. DeferUntil's two writes, running -> deferred and (once the
// task's slot is re-acquired) deferred -> running, go through a
// deferWriter each, batched as the completer batches finished attempts
// (most resumes ride on a completion write instead, see slots.Waiter; and
// a park write claims new work for the slots it frees in its own
// transaction, see TaskDeferAndClaim):
// a handler submits its task and waits for its own answer (moved, or
// lost to a cancel or rescue), and the writer commits what has queued in
// one statement and transaction. Ten thousand tasks that park at once
// cost tens of statements, not ten thousand. While parked, a task waits
// on its signal channel only; one shared timer (wakeups) sends on it when
// its interval elapses.

// deferWrite is one handler's request to a deferWriter.
type deferWrite struct {
	ex   *execution
	wait *store.Wait // the durable wait a park stores, if any
	// every is the interval of the DeferUntil condition a park stores
	// when it is in no durable wait (0: none), since when it parked.
	every time.Duration
	since time.Time
	ctx   context.Context
	reply chan error // buffered: the writer never blocks on it
}

// deferWriter batches one kind of DeferUntil write (see batch.Writer).
type deferWriter struct {
	e    *Engine
	name string // loop name, for dbHealth and logs
	// write commits a batch and returns the moves that took place, and the
	// tasks claimed in the same transaction for the slots parking freed.
	write func(ctx context.Context, batch []*deferWrite) ([]store.Moved, []store.Claimed, error)
	// releaseSlots gives back the slots of moved tasks (parking).
	releaseSlots bool
	health       *backoff.Loop
	batcher      *batch.Writer[*deferWrite]

	life             sync.Mutex // orders Start and Stop
	started, stopped bool

	batches atomic.Int64 // statements committed, for tests
	claimed atomic.Int64 // tasks claimed by park writes, for tests
}

// deferWriters is how many batches one deferWriter has in flight at once
// (see completer.Writers).
const deferWriters = 2

// errEngineStopped answers a deferral submitted after the engine's writers
// stopped (a handler that ignored its cancelled context).
var errEngineStopped = fmt.Errorf("%w: engine stopped", ErrTaskLost)

func newParkWriter(e *Engine) *deferWriter {
	w := newDeferWriter(e, "park", func(ctx context.Context, batch []*deferWrite) ([]store.Moved, []store.Claimed, error) {
		items := make([]store.TransitionItem, len(batch))
		var queues []string
		seen := map[*queueRunner]bool{}
		for i, r := range batch {
			items[i] = outcome.Parked(r.ex.Task.ID, r.ex.Task.Attempt, r.ex.RowState())
			if r.wait != nil {
				items[i].SetWait(r.wait)
			} else if r.every > 0 {
				items[i].SetCondition(r.every, r.since)
			}
			if q := r.ex.q; !seen[q] {
				seen[q] = true
				if q.ClaimsOnPark() {
					queues = append(queues, q.Name)
				}
			}
		}
		park := store.TransitionParams{From: []string{store.StatusRunning}, WorkerID: e.workerID, Items: items}
		if len(queues) == 0 {
			moved, err := e.st.Transition(ctx, park)
			return moved, nil, err
		}
		keyed := e.keyed.Load()
		cp := store.ClaimParams{Queues: queues, WorkerID: e.workerID, Lease: e.cfg.LeaseDuration, Keyed: keyed, Floors: e.queues.Floors(queues)}
		if keyed {
			cp.After, cp.KeyedFloors = e.queues.Turns(queues), e.queues.KeyedFloors(queues)
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
					if r.ex.q.Name == name {
						cp.Limits[i]++
					}
				}
			}
			moved, claimed, err = e.st.TaskParkAndClaimOne(ctx, park, cp)
		} else {
			moved, claimed, err = e.st.TaskDeferAndClaim(ctx, store.TaskDeferClaimParams{Park: park, Queues: queues,
				Lease: cp.Lease, Keyed: keyed, After: cp.After, Floors: cp.Floors, KeyedFloors: cp.KeyedFloors})
		}
		e.queues.AfterClaim(cp, claimed, err)
		return moved, claimed, err
	})
	w.releaseSlots = true
	return w
}

func newResumeWriter(e *Engine) *deferWriter {
	return newDeferWriter(e, "resume", func(ctx context.Context, batch []*deferWrite) ([]store.Moved, []store.Claimed, error) {
		tasks := make([]store.ResumeTask, len(batch))
		for i, r := range batch {
			tasks[i] = store.ResumeTask{ID: r.ex.Task.ID, Attempt: r.ex.Task.Attempt}
		}
		moved, err := e.st.TaskResumeBatch(ctx, store.TaskResumeParams{WorkerID: e.workerID, Tasks: tasks, Lease: e.cfg.LeaseDuration})
		return moved, nil, err
	})
}

func newDeferWriter(e *Engine, name string, write func(context.Context, []*deferWrite) ([]store.Moved, []store.Claimed, error)) *deferWriter {
	w := &deferWriter{e: e, name: name, write: write, health: e.health.Loop(name)}
	// A batch gathers while handlers that hold slots are still running:
	// those of one claimed batch reach DeferUntil close together.
	w.batcher = batch.New(batch.Config[*deferWrite]{Max: e.cfg.CompletionBatch, Writers: deferWriters, Write: w.flush,
		More: func(n int) bool { return e.slotsHeld() > n }, Clock: e.cfg.Clock})
	return w
}

// do submits ex's task and waits for the answer: nil when it moved,
// ErrTaskLost when its row was no longer this attempt's, ctx's error when
// ctx ended before the write. It does not return while its write may
// still commit (the writer answers a request whose ctx ended at its next
// try), so that nothing else touches the execution's slot meanwhile.
func (w *deferWriter) do(ctx context.Context, ex *execution) error { return w.submit(ctx, ex, nil, 0) }

// submit is do for a park that stores wait as the task's durable wait,
// or, when wait is nil, every as the interval of the DeferUntil
// condition it parks in (durable waits store no interval: their rows
// say what they wait for instead).
func (w *deferWriter) submit(ctx context.Context, ex *execution, wait *store.Wait, every time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := &deferWrite{ex: ex, wait: wait, every: every, since: w.e.cfg.Clock(), ctx: ctx, reply: make(chan error, 1)}
	if err := w.batcher.Submit(r); err != nil {
		return errEngineStopped
	}
	return <-r.reply
}

// close stops the writer after writing what has been submitted; later
// submits get errEngineStopped. Safe twice.
// Start runs the writer's batches and returns at once; Stop writes
// what was submitted and stops, safe twice or before Start.
func (w *deferWriter) Start(context.Context) error {
	w.life.Lock()
	defer w.life.Unlock()
	if !w.started && !w.stopped {
		w.started = true
		go w.batcher.Run()
	}
	return nil
}

func (w *deferWriter) Stop() {
	w.life.Lock()
	started := w.started
	w.stopped = true
	w.life.Unlock()
	if started {
		w.batcher.Close()
	}
}

// flush commits a batch, retrying with backoff while the database fails;
// requests whose handler context ended meanwhile are answered and left
// out.
func (w *deferWriter) flush(batch []*deferWrite) {
	e := w.e
	ctx := context.Background()
	var bo *backoff.Backoff // made at the first failure
	for {
		live := batch[:0]
		for _, r := range batch {
			if err := r.ctx.Err(); err != nil {
				r.reply <- err
				continue
			}
			live = append(live, r)
		}
		batch = live
		if len(batch) == 0 {
			return
		}
		start := e.cfg.Clock()
		moved, claimed, err := w.write(ctx, batch)
		e.tr.deferBatch(start, w.name, collect(e.tr, batch, func(r *deferWrite) *execution { return r.ex }), claimed, err)
		if err == nil {
			w.health.OK(ctx)
			w.batches.Add(1)
			countMoves(moved)
			countTransition(store.StatusReady, store.StatusRunning, len(claimed))
			w.claimed.Add(int64(len(claimed)))
			w.settle(batch, moved, claimed)
			return
		}
		w.health.Fail(ctx, fmt.Errorf("%s %d deferred tasks: %w", w.name, len(batch), err))
		if bo == nil {
			bo = backoff.New(rand.Float64)
		}
		e.health.Wait(ctx, nil, bo.Next())
	}
}

// settle answers each request of a committed batch and, for parking,
// passes the slots of the moved tasks to the tasks claimed with them and
// gives back the rest, per queue in one go.
func (w *deferWriter) settle(batch []*deferWrite, moved []store.Moved, claimed []store.Claimed) {
	e := w.e
	ok := make(map[int64]bool, len(moved))
	for _, m := range moved {
		ok[m.TaskID] = true
	}
	if w.releaseSlots {
		freed := map[*queueRunner]int{}
		for _, r := range batch {
			if ok[r.ex.Task.ID] && r.ex.HoldsSlot.Swap(false) {
				freed[r.ex.q]++
			}
		}
		for _, c := range claimed {
			q := e.queues[c.Queue]
			freed[q]-- // the parked task's slot is the claimed one's
			e.startExecution(q, c)
		}
		for q, n := range freed {
			if n > 0 {
				q.Slots.Release(n)
			}
		}
	}
	for _, r := range batch {
		if ok[r.ex.Task.ID] {
			r.reply <- nil
		} else {
			r.reply <- ErrTaskLost
		}
	}
}
