package cron_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/cron"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

var errUnknown = errors.New("unknown workflow")

// checks know the workflow "report" and take any input but "bad".
var checks = cron.Checks{
	Known:   func(name string) bool { return name == "report" },
	Unknown: errUnknown,
	Input: func(input any) (json.RawMessage, error) {
		if input == "bad" {
			return nil, errors.New("not an object")
		}
		return json.RawMessage(`{}`), nil
	},
}

func TestParamsNameTheBadField(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ok := cron.Definition{Name: "s", Expression: "@daily", Workflow: "report"}
	with := func(f func(*cron.Definition)) cron.Definition { d := ok; f(&d); return d }
	for _, c := range []struct {
		def          cron.Definition
		field, value string
	}{
		{with(func(d *cron.Definition) { d.Name = "a b" }), "name", "a b"},
		{with(func(d *cron.Definition) { d.Expression = "* *" }), "expression", "* *"},
		{with(func(d *cron.Definition) { d.Expression = "0 0 30 2 *" }), "expression", "0 0 30 2 *"},
		{with(func(d *cron.Definition) { d.Timezone = "Nowhere/Atlantis" }), "timezone", "Nowhere/Atlantis"},
		{with(func(d *cron.Definition) { d.Workflow = "other" }), "workflow", "other"},
		{with(func(d *cron.Definition) { d.Input = "bad" }), "input", ""},
		{with(func(d *cron.Definition) { d.CatchUp = "some" }), "catch_up", "some"},
		{with(func(d *cron.Definition) { d.MaxCatchUp = cron.MaxMaxCatchUp + 1 }), "max_catch_up", strconv.Itoa(cron.MaxMaxCatchUp + 1)},
		{with(func(d *cron.Definition) { d.MaxCatchUp = -1 }), "max_catch_up", "-1"},
	} {
		_, err := cron.Params(c.def, now, checks)
		fe, isField := errors.AsType[*cron.FieldError](err)
		require.True(t, isField, "%+v: %v", c.def, err)
		require.Equal(t, c.field, fe.Field)
		require.Equal(t, c.value, fe.Value)
	}
	_, err := cron.Params(with(func(d *cron.Definition) { d.Workflow = "other" }), now, checks)
	require.ErrorIs(t, err, errUnknown)
	require.ErrorContains(t, err, "register it before scheduling it")

	p, err := cron.Params(with(func(d *cron.Definition) { d.Expression = "  0 3 * * *  "; d.Paused = true }), now, checks)
	require.NoError(t, err)
	require.Equal(t, &store.ScheduleParams{Name: "s", Expression: "0 3 * * *", Timezone: "UTC", Workflow: "report",
		Input: json.RawMessage(`{}`), CatchUp: cron.CatchUpSkip, MaxCatchUp: cron.DefaultMaxCatchUp, Paused: true,
		NextFireAt: time.Date(2030, 1, 1, 3, 0, 0, 0, time.UTC)}, p)
}

func TestNextFires(t *testing.T) {
	t.Parallel()
	after := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	fires, err := cron.NextFires("@every 90s", "", after, 2)
	require.NoError(t, err)
	require.Equal(t, []time.Time{after.Add(90 * time.Second), after.Add(180 * time.Second)}, fires)
	fires, err = cron.NextFires("@hourly", "UTC", after, 5000)
	require.NoError(t, err)
	require.Len(t, fires, 1000)
	_, err = cron.NextFires("@daily", "Local", after, 1)
	fe, ok := errors.AsType[*cron.FieldError](err)
	require.True(t, ok, "%v", err)
	require.Equal(t, "timezone", fe.Field)
}

func TestResumeAndFireByHand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(ctx, []string{"default"}))
	clk := &fakeClock{t: time.Date(2031, 6, 1, 10, 30, 0, 0, time.UTC)}

	p, err := cron.Params(cron.Definition{Name: "noon", Expression: "0 12 * * *", Workflow: "report", Paused: true}, clk.Now(), checks)
	require.NoError(t, err)
	sc, err := st.ScheduleInsert(ctx, p)
	require.NoError(t, err)
	require.NoError(t, cron.ApplyConfig(ctx, st, nil))

	// Resuming computes the next fire from now.
	clk.Set(time.Date(2031, 6, 3, 12, 30, 0, 0, time.UTC))
	require.NoError(t, cron.Resume(ctx, st, "noon", clk.Now))
	got, err := st.ScheduleGet(ctx, "noon")
	require.NoError(t, err)
	require.False(t, got.Paused)
	require.Equal(t, time.Date(2031, 6, 4, 12, 0, 0, 0, time.UTC), got.NextFireAt.UTC())
	require.ErrorIs(t, cron.Resume(ctx, st, "nope", clk.Now), store.ErrNotFound)

	q := &enqueuer{}
	workflow, run, err := cron.FireByHand(ctx, st, "noon", clk.Now, q.enqueue, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, "report", workflow)
	require.False(t, run.Existing)
	require.Equal(t, []string{"schedule:" + strconv.FormatInt(sc.ID, 10) + ":manual:" + strconv.FormatInt(clk.Now().UnixNano(), 10)}, q.keys())
	got, err = st.ScheduleGet(ctx, "noon")
	require.NoError(t, err)
	require.Equal(t, run.ID, *got.LastRunID)
	require.Equal(t, time.Date(2031, 6, 4, 12, 0, 0, 0, time.UTC), got.NextFireAt.UTC(), "a fire by hand leaves the next fire")
}
