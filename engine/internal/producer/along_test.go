package producer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/completer"
	"github.com/cairnhq/cairn/engine/internal/executor"
	"github.com/cairnhq/cairn/engine/internal/slots"
	"github.com/cairnhq/cairn/store"
)

// exec is an execution of a test: the executor's state and its queue.
type exec struct {
	executor.Execution
	q *Queue[*exec]
}

func (x *exec) Exec() *executor.Execution { return &x.Execution }
func (x *exec) Queue() *Queue[*exec]      { return x.q }

var errLost = errors.New("task lost")

// alongOver is the completion side of queues, recording the rows it
// starts and the executions it forgets.
type alongOver struct {
	*Along[*exec]
	keyed     atomic.Bool
	started   []int64
	startedOn []*Queue[*exec]
	forgot    []int64
}

func newAlong(qs Queues[*exec]) *alongOver {
	s := &alongOver{}
	s.Along = NewAlong(AlongConfig[*exec]{Queues: qs, WorkerID: 7, Lease: time.Minute, Keyed: &s.keyed, Lost: errLost,
		Start: func(q *Queue[*exec], c store.Claimed) {
			s.started = append(s.started, c.ID)
			s.startedOn = append(s.startedOn, q)
		},
		Forget: func(id int64) { s.forgot = append(s.forgot, id) }})
	return s
}

// running returns n executions of q holding one of its slots each, as
// finished attempts to write.
func running(t *testing.T, q *Queue[*exec], firstID int64, n int) []completer.Completion[*exec] {
	t.Helper()
	require.Equal(t, n, q.Slots.TryAcquireUpTo(n))
	out := make([]completer.Completion[*exec], n)
	for i := range out {
		x := &exec{q: q}
		x.Task.ID = firstID + int64(i)
		x.HoldsSlot.Store(true)
		out[i] = completer.Completion[*exec]{Ex: x}
	}
	return out
}

// A slot freed by a batch goes first to a deferred task waiting for one:
// the write resumes it (or finds it lost) instead of claiming; after the
// commit the waiter holds the slot and learns the outcome, and the
// batch's executions are forgotten.
func TestAlongHandsFreedSlotsToWaitingDeferredTasks(t *testing.T) {
	for _, resumed := range []bool{true, false} {
		q := NewQueue[*exec]("q", 2)
		s := newAlong(Queues[*exec]{"q": q})
		batch := running(t, q, 1, 2)
		parked := &exec{q: q}
		parked.Task.ID = 10
		type got struct {
			w   *slots.Waiter[*exec]
			err error
		}
		done := make(chan got, 1)
		go func() {
			w, err := q.Slots.AcquireFor(context.Background(), parked)
			done <- got{w, err}
		}()
		require.Eventually(t, func() bool { return q.Slots.Waiting() == 1 }, 5*time.Second, time.Millisecond)

		var a along[*exec]
		s.Plan(batch[:1], false, &a)
		require.Equal(t, []*exec{parked}, a.Resume, "the freed slot is handed to the waiting task")
		require.Zero(t, a.Total, "no slot left to claim for")
		require.False(t, batch[0].Ex.HoldsSlot.Load(), "the batch's slot is the write's")

		s.Written(batch[:1], &a, s.ClaimParams(&a), nil, map[int64]bool{10: resumed})
		g := <-done
		require.NoError(t, g.err)
		require.NotNil(t, g.w, "the slot came by hand-off")
		if resumed {
			require.NoError(t, g.w.Err())
		} else {
			require.ErrorIs(t, g.w.Err(), errLost, "a hand-off whose resume did not happen")
		}
		require.True(t, parked.HoldsSlot.Load())
		require.Equal(t, []int64{1}, s.forgot)
		require.Empty(t, s.started)
		require.Zero(t, q.Slots.Available(), "one slot held by the resumed task, one by the other running one")
	}
}

// A write claims along for the slots it frees; the rows claimed are
// started through Start on the queue they belong to, the slots left are
// released, and a queue that gave fewer rows than asked is drained.
func TestAlongStartsClaimedRowsAndReleasesTheRest(t *testing.T) {
	q, other := NewQueue[*exec]("q", 4), NewQueue[*exec]("other", 4)
	s := newAlong(Queues[*exec]{"q": q, "other": other})
	batch := append(running(t, q, 1, 3), running(t, other, 11, 1)...)
	var a along[*exec]
	s.Plan(batch, false, &a)
	require.Equal(t, 4, a.Total)
	require.Empty(t, a.Resume)
	p := s.ClaimParams(&a)
	require.ElementsMatch(t, []string{"q", "other"}, p.Queues)
	require.Equal(t, int64(7), p.WorkerID)
	for i, name := range p.Queues {
		require.Equal(t, map[string]int{"q": 3, "other": 1}[name], p.Limits[i])
	}

	pokes := q.Pokes.Load()
	claimed := []store.Claimed{{Task: store.Task{ID: 21, Queue: "q", AvailableAt: time.Unix(1000, 0)}},
		{Task: store.Task{ID: 22, Queue: "other", AvailableAt: time.Unix(1000, 0)}}}
	s.Written(batch, &a, p, claimed, nil)
	require.Equal(t, []int64{21, 22}, s.started)
	require.Equal(t, []*Queue[*exec]{q, other}, s.startedOn)
	require.ElementsMatch(t, []int64{1, 2, 3, 11}, s.forgot)
	require.Equal(t, 3, q.Slots.Available(), "2 of q's 3 slots not claimed for are released")
	require.Equal(t, 3, other.Slots.Available())
	_, drained := q.IsDrained()
	require.True(t, drained, "q gave 1 row of 3")
	require.Equal(t, pokes, q.Pokes.Load(), "a drained queue's slots are released without waking a claim loop")
	_, drained = other.IsDrained()
	require.False(t, drained, "other gave all it was asked")
	require.False(t, q.Floor.Get().At.IsZero(), "the claim raised the floor")
	q.StopAndWait() // the claims along ended
	other.StopAndWait()
}

// A queue whose last claim found it empty is not claimed for, unless the
// write releases dependents (which it could claim); its slots are
// released quietly while nothing announced work.
func TestAlongSkipsADrainedQueueUnlessTheWriteReleases(t *testing.T) {
	q := NewQueue[*exec]("q", 4)
	s := newAlong(Queues[*exec]{"q": q})
	q.ClaimEnded(q.Pokes.Load(), true)

	batch := running(t, q, 1, 2)
	var a along[*exec]
	s.Plan(batch, false, &a)
	require.Zero(t, a.Total, "drained, nothing released")
	pokes := q.Pokes.Load()
	s.Written(batch, &a, s.ClaimParams(&a), nil, nil)
	require.Equal(t, 4, q.Slots.Available())
	require.Equal(t, pokes, q.Pokes.Load(), "released quietly")

	batch = running(t, q, 3, 2)
	a = along[*exec]{}
	s.Plan(batch, true, &a)
	require.Equal(t, 2, a.Total, "the write releases dependents: it claims for its slots")
	s.Written(batch, &a, s.ClaimParams(&a), nil, nil)
	require.Equal(t, 4, q.Slots.Available())
	q.StopAndWait()
}

// A capped queue is not claimed for (its cap is counted under a lock by
// the claim loop), nor one with deferred tasks waiting, nor a stopped
// one; their slots are released, waking a claim loop.
func TestAlongDoesNotClaimForCappedOrStoppedQueues(t *testing.T) {
	q := NewQueue[*exec]("q", 4)
	s := newAlong(Queues[*exec]{"q": q})
	q.Capped.Store(true)
	batch := running(t, q, 1, 2)
	var a along[*exec]
	s.Plan(batch, true, &a)
	require.Zero(t, a.Total, "capped")
	pokes := q.Pokes.Load()
	s.Written(batch, &a, s.ClaimParams(&a), nil, nil)
	require.Equal(t, 4, q.Slots.Available())
	require.Greater(t, q.Pokes.Load(), pokes, "the freed slots wake a claim loop")

	q.Capped.Store(false)
	q.Stop()
	batch = running(t, q, 3, 1)
	a = along[*exec]{}
	s.Plan(batch, true, &a)
	require.Zero(t, a.Total, "stopped")
	s.Written(batch, &a, s.ClaimParams(&a), nil, nil)
	require.Equal(t, 4, q.Slots.Available())
}

// A claim along whose write failed is ended (Shutdown does not wait for
// it) and the queue's floor reset; the write then frees the slots alone.
func TestAlongClaimFailed(t *testing.T) {
	q := NewQueue[*exec]("q", 4)
	s := newAlong(Queues[*exec]{"q": q})
	q.Floor.Raise(store.ClaimFloor{}, store.ClaimFloor{At: time.Unix(2000, 0)})
	batch := running(t, q, 1, 2)
	var a along[*exec]
	s.Plan(batch, false, &a)
	require.Equal(t, 2, a.Total)
	p := s.ClaimParams(&a)
	s.ClaimFailed(&a, p, errors.New("database down"))
	a.Total = 0 // as the completer does
	require.True(t, q.Floor.Get().At.IsZero(), "the floor is back at the start")
	stopped := make(chan struct{})
	go func() { q.StopAndWait(); close(stopped) }()
	<-stopped // the claim along ended: nothing to wait for
	s.Written(batch, &a, store.ClaimParams{}, nil, nil)
	require.Equal(t, 4, q.Slots.Available())
	require.Equal(t, []int64{1, 2}, s.forgot)
}
