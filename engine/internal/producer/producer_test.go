package producer_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/producer"
	"github.com/cairnhq/cairn/store"
)

// fakeStore returns up to ready rows per claim.
type fakeStore struct {
	ready        int
	fail         bool
	asked        []int
	capped       bool
	capErr       error // QueueGet fails with it
	reads        int   // QueueGet calls
	cappedClaims int
}

func (s *fakeStore) QueueGet(context.Context, string) (*store.Queue, error) {
	s.reads++
	if s.capErr != nil {
		return nil, s.capErr
	}
	q := &store.Queue{}
	if s.capped {
		n := 1
		q.MaxRunning = &n
	}
	return q, nil
}

func (s *fakeStore) claim(p store.ClaimParams) ([]store.Claimed, error) {
	s.asked = append(s.asked, p.Limits[0])
	if s.fail {
		return nil, errors.New("database down")
	}
	out := p.Buf
	for i := 0; i < p.Limits[0] && s.ready > 0; i++ {
		s.ready--
		out = append(out, store.Claimed{Task: store.Task{ID: int64(100 + s.ready), Queue: p.Queues[0], AvailableAt: time.Unix(1000, 0)}})
	}
	return out, nil
}

func (s *fakeStore) TaskClaim(_ context.Context, p store.ClaimParams) ([]store.Claimed, error) {
	return s.claim(p)
}

func (s *fakeStore) TaskClaimCapped(_ context.Context, p store.ClaimParams) ([]store.Claimed, error) {
	s.cappedClaims++
	return s.claim(p)
}

func (s *fakeStore) TaskClaimFloor(context.Context, string, int64) (store.ClaimFloor, bool, error) {
	return store.ClaimFloor{}, false, nil
}

func (s *fakeStore) TaskKeyedFloor(context.Context, string, int64, time.Time) (time.Time, error) {
	return time.Time{}, nil
}

func newProducer(st *fakeStore, slots int, started *[]int64) (*producer.Producer[int], *producer.Queue[int]) {
	q := producer.NewQueue[int]("q", slots)
	qs := producer.Queues[int]{"q": q}
	var keyed atomic.Bool
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	return producer.New(producer.Config[int]{Store: st, Queues: qs, Queue: q, WorkerID: 1, Lease: time.Minute, Poll: time.Hour,
		Keyed: &keyed, Clock: time.Now, Health: backoff.NewHealth(log, time.Now),
		Start:     func(c store.Claimed) { *started = append(*started, c.ID) },
		OnClaim:   func(time.Time, string, int, []store.Claimed, error) {},
		OnClaimed: func(time.Time, int) {}}), q
}

// RunOnce claims up to its share of the free slots, starts each row
// claimed, gives back the slots it did not fill, and marks the queue
// drained when it got fewer rows than it asked for.
func TestRunOnceClaimsAndStarts(t *testing.T) {
	st := &fakeStore{ready: 3}
	var started []int64
	p, q := newProducer(st, 8, &started)
	var buf []store.Claimed
	asked, got, err := p.RunOnce(context.Background(), &buf)
	require.NoError(t, err)
	require.Equal(t, 4, asked, "half of 8 slots")
	require.Equal(t, 3, got)
	require.Len(t, started, 3)
	require.Equal(t, 5, q.Slots.Available(), "3 slots held by the started rows")
	_, drained := q.IsDrained()
	require.True(t, drained)
	require.Empty(t, buf, "the rows' array is kept, emptied")
	require.False(t, q.Floor.Get().At.IsZero(), "the floor rose below the claim's first task")
}

// A failed claim gives its slots back and puts the floor to the start.
func TestRunOnceFailure(t *testing.T) {
	st := &fakeStore{ready: 3, fail: true}
	var started []int64
	p, q := newProducer(st, 8, &started)
	q.Floor.Raise(store.ClaimFloor{}, store.ClaimFloor{At: time.Unix(2000, 0)})
	var buf []store.Claimed
	_, got, err := p.RunOnce(context.Background(), &buf)
	require.Error(t, err)
	require.Zero(t, got)
	require.Empty(t, started)
	require.Equal(t, 8, q.Slots.Available())
	require.True(t, q.Floor.Get().At.IsZero())
}

// A stopped queue claims nothing; Stop is safe before Start and twice.
func TestStartStop(t *testing.T) {
	var started []int64
	p, _ := newProducer(&fakeStore{}, 4, &started)
	p.Stop()
	p.Stop()
	var buf []store.Claimed
	asked, _, err := p.RunOnce(context.Background(), &buf)
	require.NoError(t, err)
	require.Zero(t, asked)

	p, q := newProducer(&fakeStore{ready: 1}, 4, &started)
	require.NoError(t, p.Start(context.Background()))
	q.Poke()
	p.Stop()
	p.Stop()
}

// A failed read of the cap leaves the queue capped, not uncapped: the
// claims that follow count the cap under its lock and read it again
// until a read succeeds; the failure is logged once, not at every read.
func TestRefreshCapFailureKeepsTheQueueCapped(t *testing.T) {
	st := &fakeStore{ready: 10, capErr: errors.New("permission denied for table queues")}
	var logs bytes.Buffer
	health := backoff.NewHealth(slog.New(slog.NewTextHandler(&logs, nil)), time.Now)
	var started []int64
	p, q := newProducer(st, 8, &started)
	ctx := context.Background()
	producer.RefreshCap(ctx, st, health, q)
	require.True(t, q.Capped.Load(), "a queue whose cap could not be read is not treated as uncapped")
	producer.RefreshCap(ctx, st, health, q)
	require.True(t, q.Capped.Load())
	require.Equal(t, 1, strings.Count(logs.String(), "database call failed"), "the failure is logged once: %s", logs.String())
	require.Equal(t, int64(2), health.FailedTries("cap:q"))

	// The next claim reads the cap again; while it fails the claim is capped.
	var buf []store.Claimed
	_, _, err := p.RunOnce(ctx, &buf)
	require.NoError(t, err)
	require.Equal(t, 1, st.cappedClaims)
	require.Equal(t, 3, st.reads)
	// The producer reports through its own health; the read is retried
	// at each claim until it succeeds.
	st.capErr = nil
	_, _, err = p.RunOnce(ctx, &buf)
	require.NoError(t, err)
	require.Equal(t, 4, st.reads)
	require.False(t, q.Capped.Load(), "read again: the queue has no cap")
	require.Equal(t, 1, st.cappedClaims)
	_, _, err = p.RunOnce(ctx, &buf)
	require.NoError(t, err)
	require.Equal(t, 4, st.reads, "no read once the cap is known")
}
