package maint_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/maint"
	"github.com/cairnhq/cairn/store"
)

// fakeTasks is the process side of a heartbeat test: which tasks run
// here, and which the heartbeat asked to stop.
type fakeTasks struct {
	mu      sync.Mutex
	running map[int64]bool
	lost    []int64
	held    map[int64]bool // as the last beat read it
}

func (f *fakeTasks) Handled() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	ids := []int64{}
	for id := range f.running {
		ids = append(ids, id)
	}
	return ids
}

func (f *fakeTasks) Running(id int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.running[id]
}

func (f *fakeTasks) LoseAbsent(_ context.Context, held map[int64]bool, _ time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held = held
	for id := range f.running {
		if !held[id] {
			f.lost = append(f.lost, id)
		}
	}
}

// A task the database gives this worker but no handler runs (a lost
// claim reply) goes back to ready once it was seen so for a lease, by
// the injected clock; a running one is kept; one the database no longer
// gives the worker is reported lost.
func TestHeartbeatRunOnceReleasesStraysAfterALease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.insertRuns(t, false, false, false)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 3})
	require.NoError(t, err)
	claimed, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{2}, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	runs, stray := claimed[0].ID, claimed[1].ID
	gone := ids[0] + ids[1] + ids[2] - runs - stray // never claimed: not held

	now := fakeNow
	tasks := &fakeTasks{running: map[int64]bool{runs: true, gone: true}}
	beats, moves := 0, 0
	hb := maint.NewHeartbeat(maint.HeartbeatConfig{Store: b.st, Tasks: tasks, WorkerID: w,
		Interval: time.Second, Lease: 10 * time.Second, Clock: func() time.Time { return now },
		Logger: slog.New(slog.DiscardHandler), Health: b.health,
		After: func() { beats++ }, OnMoves: func(ms ...[]store.Moved) {
			for _, m := range ms {
				moves += len(m)
			}
		}})

	status := func(id int64) string {
		task, err := b.st.TaskGet(ctx, id)
		require.NoError(t, err)
		return task.Status
	}
	require.NoError(t, hb.RunOnce(ctx))
	require.Equal(t, store.StatusRunning, status(stray), "first seen: kept for a lease")
	require.Equal(t, []int64{gone}, tasks.lost, "a task not held by the worker is reported lost")
	now = now.Add(9 * time.Second)
	require.NoError(t, hb.RunOnce(ctx))
	require.Equal(t, store.StatusRunning, status(stray), "seen for less than a lease")
	now = now.Add(time.Second)
	require.NoError(t, hb.RunOnce(ctx))
	require.Equal(t, store.StatusReady, status(stray), "seen for a lease: released")
	require.Equal(t, store.StatusRunning, status(runs), "a task running here is kept")
	require.Equal(t, 3, beats)
	require.Equal(t, 1, moves)
}

// Between the beats that look for strays (the first, then every
// FindEvery-th), a beat reads only the tasks handled here and the strays
// found before: a task claimed since the last look and handled nowhere
// (a lost claim reply) is neither reported nor renewed until the next
// look finds it, well within its lease.
func TestHeartbeatFindsStraysOnlyAtFullReads(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.insertRuns(t, false, false, false)
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 3})
	require.NoError(t, err)
	claim := func(lease time.Duration) int64 {
		c, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{1}, Lease: lease})
		require.NoError(t, err)
		require.Len(t, c, 1)
		return c[0].ID
	}
	leaseOf := func(id int64) time.Time {
		task, err := b.st.TaskGet(ctx, id)
		require.NoError(t, err)
		return *task.LeaseExpiresAt
	}
	handled, stray := claim(time.Hour), claim(time.Hour)

	tasks := &fakeTasks{running: map[int64]bool{handled: true}}
	hb := maint.NewHeartbeat(maint.HeartbeatConfig{Store: b.st, Tasks: tasks, WorkerID: w,
		Interval: time.Second, Lease: 10 * time.Second, Clock: func() time.Time { return fakeNow },
		Logger: slog.New(slog.DiscardHandler), Health: b.health, OnMoves: func(...[]store.Moved) {}})
	require.Equal(t, 5, maint.FindEvery(10*time.Second, time.Second))

	require.NoError(t, hb.RunOnce(ctx))
	require.Equal(t, map[int64]bool{handled: true, stray: true}, tasks.held, "the first beat finds the stray")
	late := claim(7 * time.Second) // claimed after the look; its lease due for renewal (within 8 s)
	due := leaseOf(late)
	for beat := 2; beat <= 5; beat++ {
		require.NoError(t, hb.RunOnce(ctx))
		require.Equal(t, map[int64]bool{handled: true, stray: true}, tasks.held, "beat %d reads the handled task and the stray found", beat)
		require.True(t, leaseOf(late).Equal(due), "beat %d leaves the lease of a task it did not read", beat)
	}
	require.NoError(t, hb.RunOnce(ctx))
	require.Equal(t, map[int64]bool{handled: true, stray: true, late: true}, tasks.held, "the sixth beat looks for strays again")
	require.True(t, leaseOf(late).After(due), "and renews the lease it found due")
	require.Empty(t, tasks.lost)
}
