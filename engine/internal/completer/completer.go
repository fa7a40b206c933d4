// Package completer writes finished attempts in batches (on package
// batch): it takes what has queued since its last write, waiting briefly
// for handlers still running, and commits it in one statement or
// transaction, retrying with backoff until it is written. Slots and
// claims are the producer's business: before a write the producer takes
// the batch's slots and says what the write does along (deferred tasks
// it resumes, tasks it claims for the freed slots); after the commit the
// completer hands back the rows it claimed along. The completer never
// decides what to claim.
package completer

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/batch"
	"github.com/cairnhq/cairn/engine/internal/claim"
	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/engine/internal/outcome"
	"github.com/cairnhq/cairn/store"
)

// Store is what the completer writes with.
type Store interface {
	TaskFinishAndClaimOne(ctx context.Context, p store.TransitionParams, claim store.ClaimParams) ([]store.Moved, []store.Claimed, error)
	TaskFinishAndClaim(ctx context.Context, p store.TransitionParams, claim store.ClaimParams) (moved, released []store.Moved, claimed []store.Claimed, err error)
	TransitionAll(ctx context.Context, p store.TransitionParams) (moved, released []store.Moved, err error)
}

// Exec is an engine's execution: the executor's state inside it.
type Exec = executor.Exec

// Completion is a finished attempt: its execution and the item to write
// (zero TaskID: nothing to write, the task is no longer this worker's).
type Completion[E Exec] struct {
	Ex   E
	Item store.TransitionItem
}

// Along is what one write does besides its completions, as the producer
// planned it (see Producer.Plan).
type Along[E Exec, S any] struct {
	// Resume are deferred tasks handed a slot the batch frees: the write
	// moves their rows deferred -> running.
	Resume []E
	// Total is how many tasks the write claims along (0: no claim).
	Total int
	// State is the producer's own, from Plan to Written.
	State S
}

// Producer is the side of the queues in a write.
type Producer[E Exec, S any] interface {
	// Plan takes the slots batch frees (releases: some of its tasks have
	// dependents, which the write releases) and fills a.
	Plan(batch []Completion[E], releases bool, a *Along[E, S])
	// ClaimParams are the parameters of a's claim, as of now (also when
	// a.Total is 0: its Keyed says whether the engine claims keyed tasks).
	ClaimParams(a *Along[E, S]) store.ClaimParams
	// ClaimFailed: a write that claimed as p failed with err; it is
	// retried without the claim (the producer ends a's claims; a.Total
	// becomes 0).
	ClaimFailed(a *Along[E, S], p store.ClaimParams, err error)
	// Written: the write of batch committed. resumed holds the ids of
	// a.Resume's tasks moved back to running; claimed the rows claimed
	// along as p asked (nil: the write claimed nothing), which the
	// producer starts before it returns (the slice is reused).
	Written(batch []Completion[E], a *Along[E, S], p store.ClaimParams, claimed []store.Claimed, resumed map[int64]bool)
}

// Config builds a Completer.
type Config[E Exec, S any] struct {
	Store    Store
	Producer Producer[E, S]
	WorkerID int64
	Lease    time.Duration // of the tasks resumed by a write
	Max      int           // the most completions in one write
	// Held counts the slots held across queues: handlers running plus
	// finished ones whose write has not committed. The completer waits
	// for more while more are held than it has gathered.
	Held  func() int
	Clock func() time.Time
	// Health logs failed writes (once per outage) and paces retries.
	Health *backoff.Health
	// OnWrite observes each attempt at a write (tracing): from start, of
	// written items, with the rows claimed along.
	OnWrite func(start time.Time, batch []Completion[E], written int, claimed []store.Claimed, err error)
	// OnCommit observes each committed write (metrics); claimed is how
	// many rows it claimed along, or -1 when it did not claim.
	OnCommit func(start time.Time, moved, released []store.Moved, claimed int)
}

// Writers is how many completion writes may be in flight at once: while
// one batch waits on its statement and commit, the next one is gathered
// and written. Their row locks are taken in id order, so they do not
// deadlock on each other's tasks.
const Writers = 2

// OneStatementBatch is the largest batch (finished plus claimed tasks)
// written by TaskFinishAndClaimOne. At 64, steady load at half capacity
// (batches of about 64) sent most writes through the five round trips
// of the transaction path. At 256 the 1-minute bloat scenario's claim
// p99 while a snapshot was held fell from about 59 ms to 31-50 ms; the
// 5-minute run and the burn-down at 1,024 slots were unchanged (see
// cmd/bench/README.md).
const OneStatementBatch = 256

// Completer writes finished attempts in batches. A task of a run with a
// task in a batch being written waits for that write (batch.Config.Key).
type Completer[E Exec, S any] struct {
	cfg    Config[E, S]
	w      *batch.Writer[Completion[E]]
	health *backoff.Loop // failed writes, shared by the writers
	// bufs are the arrays a write builds its items in and reads its
	// claimed rows into, one pair per write in flight, reused: a fresh
	// pair per write was a third of the engine's garbage under load.
	bufs chan *writeBufs[E, S]

	handoffWrites atomic.Int64 // writes that also resumed deferred tasks, for tests
	oneStatement  atomic.Int64 // writes made by TaskFinishAndClaimOne, for tests
	claimedAlong  atomic.Int64 // writes that claimed along, for tests
	apartWrites   atomic.Int64 // batches written item by item after a refusal, for tests
}

type writeBufs[E Exec, S any] struct {
	items   []store.TransitionItem
	claimed []store.Claimed
	along   Along[E, S] // emptied after each write
}

// New returns a completer; Start runs it.
func New[E Exec, S any](cfg Config[E, S]) *Completer[E, S] {
	c := &Completer[E, S]{cfg: cfg, health: cfg.Health.Loop("completer"), bufs: make(chan *writeBufs[E, S], Writers)}
	for range Writers {
		c.bufs <- &writeBufs[E, S]{}
	}
	c.w = batch.New(batch.Config[Completion[E]]{Max: cfg.Max, Writers: Writers, Write: c.Flush,
		// More are coming while slots are held by handlers still running
		// (those of batches being written are done).
		More:  func(n int) bool { return cfg.Held()-c.w.Writing() > n },
		Key:   func(b Completion[E]) int64 { return b.Ex.Exec().Task.RunID },
		Clock: cfg.Clock})
	return c
}

// Start runs the writer and returns at once. The context is not used:
// the completer writes until Stop, after the handlers returned.
func (c *Completer[E, S]) Start(ctx context.Context) error { return c.w.Start(ctx) }

// Stop writes what was submitted and stops. Safe twice or before Start.
func (c *Completer[E, S]) Stop() { c.w.Stop() }

// Submit queues a finished attempt for the next write; it fails once the
// completer stopped.
func (c *Completer[E, S]) Submit(b Completion[E]) error { return c.w.Submit(b) }

// HandoffWrites, OneStatementWrites and ClaimingWrites count the writes
// that resumed deferred tasks, were one statement, claimed along: for
// tests.
func (c *Completer[E, S]) HandoffWrites() int64      { return c.handoffWrites.Load() }
func (c *Completer[E, S]) OneStatementWrites() int64 { return c.oneStatement.Load() }
func (c *Completer[E, S]) ClaimingWrites() int64     { return c.claimedAlong.Load() }

// ApartWrites counts the batches the database refused, written item by
// item: for tests.
func (c *Completer[E, S]) ApartWrites() int64 { return c.apartWrites.Load() }

// Flush commits a batch, retrying with backoff until it is written: a
// finished attempt is never dropped (if its lease runs out meanwhile, the
// rescuer takes over and this write becomes a no-op). The batch writer
// calls it; tests call it directly.
func (c *Completer[E, S]) Flush(batch []Completion[E]) {
	cfg := &c.cfg
	releases := false // some task of the batch has dependents
	for _, b := range batch {
		releases = releases || len(b.Ex.Exec().Task.Dependents) > 0
	}
	// At most Writers writes run at once: a set of arrays is always free.
	bufs := <-c.bufs
	defer func() { c.bufs <- bufs }()
	// The producer takes the batch's slots (a park write that commits
	// meanwhile must not release them as well), hands some to deferred
	// tasks waiting for one, and asks for claims for the others.
	along := &bufs.along
	defer func() { *along = Along[E, S]{} }()
	cfg.Producer.Plan(batch, releases, along)
	items := bufs.items[:0]
	defer func() { claim.KeepBuf(&bufs.items, items) }()
	for _, b := range batch {
		if b.Item.TaskID != 0 {
			item := b.Item
			item.From = b.Ex.Exec().RowState()
			items = append(items, item)
		}
	}
	for _, r := range along.Resume {
		x := r.Exec()
		items = append(items, outcome.Resumed(x.Task.ID, x.Task.Attempt, x.RowState(), cfg.Lease))
	}
	// A batch of tasks without dependents, none of them resumed here,
	// releases nothing: it is written in one statement, saving the round
	// trips of a transaction (BEGIN, finish, claim, COMMIT), which is
	// what a small batch mostly costs. Large batches keep the two
	// statements: measured, they run faster that way.
	leaves := !releases && len(along.Resume) == 0 && len(batch)+along.Total <= OneStatementBatch
	var claimed []store.Claimed
	var moved []store.Moved
	var cp store.ClaimParams
	ctx := context.Background()
	var bo *backoff.Backoff // made at the first failure
	for len(items) > 0 || along.Total > 0 {
		var released []store.Moved
		var got []store.Claimed
		start := cfg.Clock()
		p := store.TransitionParams{From: []string{store.StatusRunning, store.StatusDeferred}, WorkerID: cfg.WorkerID, Items: items}
		var err error
		cp = cfg.Producer.ClaimParams(along)
		cp.Buf = bufs.claimed
		oneStatement := leaves && store.FinishClaimable(p)
		switch {
		case oneStatement:
			// Nothing to release: one statement, one commit.
			moved, got, err = cfg.Store.TaskFinishAndClaimOne(ctx, p, cp)
		case along.Total > 0:
			moved, released, got, err = cfg.Store.TaskFinishAndClaim(ctx, p, cp)
		default:
			moved, released, err = cfg.Store.TransitionAll(ctx, p)
		}
		cfg.OnWrite(start, batch, len(items), got, err)
		if err == nil {
			c.health.OK(ctx)
			n := -1
			if along.Total > 0 {
				n = len(got)
				c.claimedAlong.Add(1)
			}
			cfg.OnCommit(start, moved, released, n)
			if len(along.Resume) > 0 {
				c.handoffWrites.Add(1)
			}
			if oneStatement {
				c.oneStatement.Add(1)
			}
			claimed = got
			break
		}
		if store.IsRefused(err) && len(items) > 0 {
			// The database refuses what the batch writes: the same write
			// would fail forever. Write its items one by one, setting
			// apart the ones refused.
			if along.Total > 0 {
				cfg.Producer.ClaimFailed(along, cp, err)
				along.Total = 0
			}
			cp = store.ClaimParams{}
			moved = c.writeApart(ctx, batch, items, err)
			claimed = nil
			break
		}
		c.health.Fail(ctx, fmt.Errorf("write %d finished tasks: %w", len(items), err))
		// Retry the write alone: the claim is an optimisation, the write is
		// not (and Shutdown need not wait for a write that claims nothing).
		if along.Total > 0 {
			cfg.Producer.ClaimFailed(along, cp, err)
			along.Total = 0
		}
		if bo == nil {
			bo = backoff.New(rand.Float64)
		}
		cfg.Health.Wait(ctx, nil, bo.Next())
	}
	var resumed map[int64]bool
	if len(along.Resume) > 0 {
		resumed = map[int64]bool{}
		for _, m := range moved {
			if m.From == store.StatusDeferred && m.To == store.StatusRunning {
				resumed[m.TaskID] = true
			}
		}
	}
	cfg.Producer.Written(batch, along, cp, claimed, resumed)
	claim.KeepBuf(&bufs.claimed, claimed)
}

// writeApart writes items one by one after the database refused their
// write as a batch (cause), and returns the rows moved. An item refused
// alone is replaced by the failure of its task with the error recorded
// (a resume refused is dropped: the task stays deferred), and if even
// that is refused the task is given back to ready; if that is refused
// too the task is left to the rescuer (its lease runs out). Each item
// set apart is logged once. Outages are waited out as in Flush.
func (c *Completer[E, S]) writeApart(ctx context.Context, batch []Completion[E], items []store.TransitionItem, cause error) []store.Moved {
	cfg := &c.cfg
	c.apartWrites.Add(1)
	var all []store.Moved
	var bo *backoff.Backoff
	for _, item := range items {
		for try := 0; ; {
			start := cfg.Clock()
			p := store.TransitionParams{From: []string{store.StatusRunning, store.StatusDeferred}, WorkerID: cfg.WorkerID,
				Items: []store.TransitionItem{item}}
			moved, released, err := cfg.Store.TransitionAll(ctx, p)
			cfg.OnWrite(start, batch, 1, nil, err)
			if err == nil {
				c.health.OK(ctx)
				cfg.OnCommit(start, moved, released, -1)
				all = append(all, moved...)
				break
			}
			if !store.IsRefused(err) {
				c.health.Fail(ctx, fmt.Errorf("write finished task %d: %w", item.TaskID, err))
				if bo == nil {
					bo = backoff.New(rand.Float64)
				}
				cfg.Health.Wait(ctx, nil, bo.Next())
				continue
			}
			try++
			next, what := refusedItem(item, err, try)
			cfg.Health.Logger().WarnContext(ctx, "completion refused by the database",
				slog.Int64("task_id", item.TaskID), slog.String("to_status", item.To), slog.String("instead", what),
				slog.Any("error", err), slog.Any("batch_error", cause))
			if next.TaskID == 0 {
				break
			}
			item = next
		}
	}
	return all
}

// refusedItem returns what to write instead of item, refused with err
// (try: how many writes of the task were refused), and says what it is
// (zero TaskID: nothing, the task is left as it is).
func refusedItem(item store.TransitionItem, err error, try int) (store.TransitionItem, string) {
	switch {
	case item.To == store.StatusRunning: // a resume: the task stays deferred
		return store.TransitionItem{}, "left deferred"
	case try == 1:
		next := outcome.Failed(item.TaskID, item.Attempt, "the database refused the task's completion: "+err.Error(), nil)
		next.From = item.From
		return next, "failed"
	case try == 2:
		next := outcome.Released(item.TaskID, "the database refused the task's completion and failure: "+err.Error())
		next.From = item.From
		return next, "released"
	}
	return store.TransitionItem{}, "left to the rescuer"
}
