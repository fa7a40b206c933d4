package maint_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine/internal/maint"
	"github.com/cairnhq/cairn/store"
)

const day = 24 * time.Hour

func (b bundle) partitionNames(t *testing.T) []string {
	t.Helper()
	parts, err := b.st.HistoryPartitionList(context.Background())
	require.NoError(t, err)
	var out []string
	for _, p := range parts {
		out = append(out, p.Name)
	}
	return out
}

// The partitioner makes today's partition and the next days' by its
// clock, once; with a retention it drops partitions past it, keeping the
// events of a live run; with none it keeps them.
func TestPartitionerRunOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := fakeNow
	p := maint.NewPartitioner(maint.PartitionerConfig{Store: b.st, Retention: -1, Clock: func() time.Time { return now },
		Logger: slog.New(slog.DiscardHandler), Health: b.health})
	require.NoError(t, p.RunOnce(ctx))
	names := b.partitionNames(t)
	for _, d := range []string{"20300102", "20300103", "20300104", "20300105"} {
		require.Contains(t, names, "task_events_"+d)
	}
	require.NotContains(t, names, "task_events_20300106")
	require.NoError(t, p.RunOnce(ctx))
	require.Equal(t, names, b.partitionNames(t), "idempotent")
	now = now.Add(day)
	require.NoError(t, p.RunOnce(ctx))
	require.Contains(t, b.partitionNames(t), "task_events_20300106", "a day later, one more")

	// A partition of forty days ago (by the database's clock) holding an
	// event of a live run.
	var dbNow time.Time
	require.NoError(t, b.db.SQL.QueryRow(`SELECT now()`).Scan(&dbNow))
	old := dbNow.Add(-40 * day).UTC().Truncate(day)
	_, err := b.st.HistoryPartitionEnsure(ctx, old, 1)
	require.NoError(t, err)
	tasks := b.insertRuns(t, false)
	task, err := b.st.TaskGet(ctx, tasks[0])
	require.NoError(t, err)
	b.exec(t, `UPDATE %s.run_rows SET created_at = $2 WHERE id = $1`, task.RunID, old)
	var id int64
	require.NoError(t, b.db.SQL.QueryRow(`INSERT INTO cairn.task_events (run_id, task_id, to_status, at) VALUES ($1, $2, 'ready', $3) RETURNING id`,
		task.RunID, task.ID, old.Add(time.Hour)).Scan(&id))
	require.NoError(t, p.RunOnce(ctx))
	require.Contains(t, b.partitionNames(t), store.HistoryDayName(old), "no retention: kept")
	var indexed bool
	require.NoError(t, b.db.SQL.QueryRow(`SELECT to_regclass($1) IS NOT NULL`, "cairn."+store.HistoryDayName(old)+"_task").Scan(&indexed))
	require.True(t, indexed, "a day that is over gets its B-tree by task")

	p = maint.NewPartitioner(maint.PartitionerConfig{Store: b.st, Retention: 30 * day, Clock: func() time.Time { return now },
		Logger: slog.New(slog.DiscardHandler), Health: b.health})
	require.NoError(t, p.RunOnce(ctx))
	require.NotContains(t, b.partitionNames(t), store.HistoryDayName(old), "past the retention: dropped")
	var where string
	require.NoError(t, b.db.SQL.QueryRow(`SELECT tableoid::regclass::text FROM cairn.task_events WHERE id = $1`, id).Scan(&where))
	require.Equal(t, "cairn.task_events_default", where, "the live run's event survives")
}

// Started, the partitioner makes the partitions at once; Stop is safe
// twice.
func TestPartitionerStartStop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := maint.NewPartitioner(maint.PartitionerConfig{Store: b.st, Retention: 30 * day, Clock: func() time.Time { return fakeNow },
		Logger: slog.New(slog.DiscardHandler), Health: b.health})
	require.Equal(t, "partitions", p.Name())
	require.NoError(t, p.Start(context.Background()))
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(b.partitionNames(t), "task_events_20300105") {
		require.True(t, time.Now().Before(deadline), "no partition made")
		time.Sleep(10 * time.Millisecond)
	}
	p.Stop()
	p.Stop()
}

// The summarizer summarizes the ranges of today's partition written
// since its last pass.
func TestSummarizerRunOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.exec(t, `INSERT INTO %s.task_events (run_id, task_id, to_status, detail)
		SELECT g, g, 'ready', jsonb_build_object('pad', repeat('x', 100)) FROM generate_series(1, 10000) g`)
	unsummarized := func() int64 {
		t.Helper()
		n, err := b.st.HistorySummarize(ctx)
		require.NoError(t, err)
		return n
	}
	require.NoError(t, maint.NewSummarizer(b.st, b.health).RunOnce(ctx))
	require.Zero(t, unsummarized(), "the pass summarized them all")
}
