package cron_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/backoff"
	"github.com/cairnhq/cairn/engine/internal/cron"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestParseNamesTheBadField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ expr, tz, field string }{
		{"* *", "UTC", "expression"},
		{"", "UTC", "expression"},
		{"TZ=Europe/Berlin 0 3 * * *", "UTC", "expression"},
		{"@every 1500ms", "UTC", "expression"},
		{"@daily", "Nowhere/Atlantis", "timezone"},
		{"@daily", "Local", "timezone"},
	} {
		_, err := cron.Parse(c.expr, c.tz)
		fe, ok := errors.AsType[*cron.FieldError](err)
		require.True(t, ok, "%q in %q: %v", c.expr, c.tz, err)
		require.Equal(t, c.field, fe.Field, "%q in %q", c.expr, c.tz)
	}
	spec, err := cron.Parse("30 2 * * *", "Europe/Berlin")
	require.NoError(t, err)
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	// Spring forward: 02:30 does not happen on 2025-03-30; it fires at 03:00.
	next := spec.Next(time.Date(2025, 3, 29, 12, 0, 0, 0, berlin))
	require.Equal(t, time.Date(2025, 3, 30, 3, 0, 0, 0, berlin), next)
}

// fakeClock is the scheduler's injected clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// enqueuer inserts the runs of fires, with their keys, and counts them.
type enqueuer struct {
	mu    sync.Mutex
	fires []cron.Fire
}

func (q *enqueuer) enqueue(ctx context.Context, tx *store.Store, fires []cron.Fire) ([]cron.Run, error) {
	ps := make([]store.RunInsertParams, len(fires))
	for i, f := range fires {
		ps[i] = store.RunInsertParams{Workflow: f.Workflow, Input: f.Input, Key: &f.Key, Queue: "default",
			Tasks: []store.TaskTemplate{{Idx: 0, Name: "t", MaxAttempts: 1, MaxRescues: 1, Deps: []int{}, Dependents: []int{}}}}
	}
	ins, err := tx.RunInsertMany(ctx, ps)
	if err != nil {
		return nil, err
	}
	out := make([]cron.Run, len(ins))
	for i, r := range ins {
		out[i] = cron.Run{ID: r.ID, Existing: r.Existing}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.fires = append(q.fires, fires...)
	return out, nil
}

func (q *enqueuer) keys() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []string
	for _, f := range q.fires {
		out = append(out, f.Key)
	}
	return out
}

func TestSchedulerRunOnceFiresADueScheduleOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(ctx, []string{"default"}))

	// Far from the database's clock: only the injected one can make it due.
	clk := &fakeClock{t: time.Date(2031, 6, 1, 11, 59, 0, 0, time.UTC)}
	sc, err := st.ScheduleInsert(ctx, &store.ScheduleParams{Name: "noon", Expression: "0 12 * * *", Timezone: "UTC",
		Workflow: "report", Input: json.RawMessage(`{"n":1}`), CatchUp: cron.CatchUpSkip, MaxCatchUp: 1,
		NextFireAt: time.Date(2031, 6, 1, 12, 0, 0, 0, time.UTC)})
	require.NoError(t, err)

	health := backoff.NewHealth(slog.New(slog.DiscardHandler), clk.Now)
	newScheduler := func(worker string, q *enqueuer, active bool) *cron.Scheduler {
		return cron.New(cron.Config{Store: st, Enqueue: q.enqueue, Active: func() bool { return active }, Worker: worker,
			Interval: time.Second, LeaderLease: 15 * time.Second, Clock: clk.Now,
			Logger: slog.New(slog.DiscardHandler), Health: health})
	}
	qa, qb := &enqueuer{}, &enqueuer{}
	a, b := newScheduler("a", qa, true), newScheduler("b", qb, true)
	idle := newScheduler("idle", &enqueuer{}, false)

	require.NoError(t, idle.RunOnce(ctx))
	_, err = st.LeaseGet(ctx, cron.LeaseName)
	require.ErrorIs(t, err, store.ErrNotFound, "an engine that can fire nothing does not take the lease")

	require.NoError(t, a.RunOnce(ctx))
	require.Empty(t, qa.keys(), "not due a minute before noon")
	lease, err := st.LeaseGet(ctx, cron.LeaseName)
	require.NoError(t, err)
	require.Equal(t, a.Holder(), lease.Holder)

	clk.Set(time.Date(2031, 6, 1, 12, 0, 5, 0, time.UTC))
	require.NoError(t, a.RunOnce(ctx))
	require.NoError(t, a.RunOnce(ctx))
	require.NoError(t, b.RunOnce(ctx)) // not the leader: fires nothing
	require.Equal(t, []string{"schedule:" + strconv.FormatInt(sc.ID, 10) + ":2031-06-01T12:00:00Z"}, qa.keys(), "fired exactly once")
	require.Empty(t, qb.keys())

	got, err := st.ScheduleGet(ctx, "noon")
	require.NoError(t, err)
	require.Equal(t, time.Date(2031, 6, 2, 12, 0, 0, 0, time.UTC), got.NextFireAt.UTC())
	require.NotNil(t, got.LastRunID)
	run, err := st.RunGet(ctx, *got.LastRunID)
	require.NoError(t, err)
	require.Equal(t, "report", run.Workflow)

	require.NoError(t, a.Release(ctx))
	_, err = st.LeaseGet(ctx, cron.LeaseName)
	require.ErrorIs(t, err, store.ErrNotFound, "Release gives the lease up")
	require.NoError(t, a.Release(ctx), "safe twice")
}
