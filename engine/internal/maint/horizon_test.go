package maint_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/maint"
	"github.com/cairnhq/cairn/store"
)

func TestHorizonWatchVacuumsTheHotTablesWhenAHeldSnapshotEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.insertRuns(t, make([]bool, 200)...)
	var logs bytes.Buffer
	now := fakeNow
	var seen store.Horizon
	var heldFor time.Duration
	w := maint.NewHorizonWatch(maint.HorizonConfig{Store: b.st, Clock: func() time.Time { return now },
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Health: b.health,
		OnHorizon: func(h store.Horizon, d time.Duration) { seen, heldFor = h, d }})
	tasksVacuums := func() int64 {
		n, _ := b.db.TableVacuums(t, "tasks")
		return n
	}

	// A snapshot shorter than a hold: seen, not reported, not vacuumed.
	_, release := b.db.HoldSnapshot(t)
	require.NoError(t, w.RunOnce(ctx))
	now = now.Add(maint.HoldAfter / 2)
	require.NoError(t, w.RunOnce(ctx))
	release()
	now = now.Add(10 * time.Second)
	require.NoError(t, w.RunOnce(ctx))
	require.NotContains(t, logs.String(), "holds back vacuum")
	require.Zero(t, tasksVacuums())
	require.Equal(t, 10*time.Second, w.LookEvery())

	// A held one: reported once it has lasted HoldAfter; the dead
	// versions it keeps are vacuumed as soon as it ends.
	pid, release := b.db.HoldSnapshot(t)
	b.db.Churn(t, "tasks", 3)
	require.NoError(t, w.RunOnce(ctx))
	now = now.Add(maint.HoldAfter)
	require.NoError(t, w.RunOnce(ctx))
	require.Contains(t, logs.String(), "holds back vacuum")
	require.Contains(t, logs.String(), fmt.Sprintf("holder=\"pid %d (", pid))
	require.Equal(t, maint.HoldAfter, heldFor)
	require.Positive(t, seen.Age)
	require.Equal(t, time.Second, w.LookEvery(), "held: a look a second, to vacuum soon after the end")
	now = now.Add(10 * time.Second)
	require.NoError(t, w.RunOnce(ctx))
	require.Zero(t, tasksVacuums(), "vacuumed while the snapshot was held")

	release()
	now = now.Add(10 * time.Second)
	require.NoError(t, w.RunOnce(ctx))
	require.Equal(t, int64(1), tasksVacuums(), "logs:\n%s", logs.String())
	require.Zero(t, heldFor, "the horizon moved")
	require.Equal(t, 10*time.Second, w.LookEvery())
	require.Empty(t, seen.Xmin)
	_, dead := b.db.TableVacuums(t, "tasks")
	require.Zero(t, dead)
	require.Contains(t, logs.String(), "held_for=1m20s")
	require.Contains(t, logs.String(), `msg="vacuumed after a held snapshot" table=tasks dead_tuples=600`)

	// Once is enough.
	now = now.Add(10 * time.Second)
	require.NoError(t, w.RunOnce(ctx))
	require.Equal(t, int64(1), tasksVacuums())
}
