package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

func TestLeaseAcquireRenewExpireRelease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	acquire := func(holder string, now time.Time) bool {
		t.Helper()
		ok, err := b.st.LeaseAcquire(ctx, &store.LeaseAcquireParams{Name: "scheduler", Holder: holder, Now: now, TTL: 10 * time.Second})
		require.NoError(t, err)
		return ok
	}
	require.True(t, acquire("a", t0))
	require.False(t, acquire("b", t0.Add(5*time.Second)), "b took a valid lease")
	require.True(t, acquire("a", t0.Add(9*time.Second)), "a could not renew")
	require.False(t, acquire("b", t0.Add(15*time.Second)), "the renewal did not extend the lease")
	require.True(t, acquire("b", t0.Add(20*time.Second)), "b could not take an expired lease")
	l, err := b.st.LeaseGet(ctx, "scheduler")
	require.NoError(t, err)
	require.Equal(t, "b", l.Holder)
	require.Equal(t, t0.Add(30*time.Second), l.ExpiresAt.UTC())
	require.Equal(t, t0.Add(20*time.Second), l.AcquiredAt.UTC())

	require.NoError(t, b.st.LeaseRelease(ctx, "scheduler", "a")) // not a's: no-op
	require.False(t, acquire("a", t0.Add(21*time.Second)))
	require.NoError(t, b.st.LeaseRelease(ctx, "scheduler", "b"))
	require.True(t, acquire("a", t0.Add(21*time.Second)))
}

func TestScheduleAdvanceIsCompareAndSet(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := &store.ScheduleParams{Name: "s", Expression: "@hourly", Timezone: "UTC", Workflow: "w", Input: json.RawMessage(`{}`),
		CatchUp: "skip", MaxCatchUp: 100, NextFireAt: t0}
	sc, err := b.st.ScheduleInsert(ctx, p)
	require.NoError(t, err)
	_, err = b.st.ScheduleInsert(ctx, p)
	require.ErrorIs(t, err, store.ErrScheduleExists)

	ids, err := b.st.ScheduleDue(ctx, &store.ScheduleDueParams{Now: t0, Limit: 10})
	require.NoError(t, err)
	require.Equal(t, []int64{sc.ID}, ids)

	run := int64(7)
	ok, err := b.st.ScheduleAdvance(ctx, &store.ScheduleAdvanceParams{ID: sc.ID, OldNextFireAt: t0, NextFireAt: t0.Add(time.Hour),
		LastFireAt: &t0, LastRunID: &run})
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = b.st.ScheduleAdvance(ctx, &store.ScheduleAdvanceParams{ID: sc.ID, OldNextFireAt: t0, NextFireAt: t0.Add(2 * time.Hour)})
	require.NoError(t, err)
	require.False(t, ok, "a stale advance won")
	got, err := b.st.ScheduleGet(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, t0.Add(time.Hour), got.NextFireAt.UTC())
	require.Equal(t, run, *got.LastRunID)

	// An upsert that changes nothing writes nothing; one that changes the
	// expression replaces the next fire.
	p.NextFireAt = t0.Add(5 * time.Hour)
	require.NoError(t, b.st.ScheduleUpsert(ctx, p))
	same, err := b.st.ScheduleGet(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, got.UpdatedAt, same.UpdatedAt)
	require.Equal(t, t0.Add(time.Hour), same.NextFireAt.UTC())
	p.Expression = "@daily"
	require.NoError(t, b.st.ScheduleUpsert(ctx, p))
	changed, err := b.st.ScheduleGet(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, t0.Add(5*time.Hour), changed.NextFireAt.UTC())
	require.Equal(t, run, *changed.LastRunID)
}
