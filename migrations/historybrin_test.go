package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// Migration 023 indexes events by task with a BRIN on the partitions
// still written to and a B-tree on those whose day is over (and
// DEFAULT); a task's history reads the same across it; down restores
// one B-tree on every partition.
func TestHistoryBRINMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r := upTo(t, "history_brin")
	st, err := store.New(db.SQL, "cairn")
	require.NoError(t, err)
	var now time.Time
	require.NoError(t, db.SQL.QueryRow(`SELECT now()`).Scan(&now))
	past := now.Add(-2 * 24 * time.Hour).UTC().Truncate(24 * time.Hour)
	_, err = st.HistoryPartitionEnsure(ctx, past, 1)
	require.NoError(t, err)
	before := schemaDump(t, db.SQL, "cairn")

	// One task's events: two days ago, today, and one no daily partition
	// covers (DEFAULT).
	var want []int64
	for _, at := range []time.Time{past.Add(time.Hour), now, now.Add(-400 * 24 * time.Hour)} {
		var id int64
		require.NoError(t, db.SQL.QueryRow(`INSERT INTO cairn.task_events (run_id, task_id, to_status, at) VALUES (1, 42, 'ready', $1) RETURNING id`, at).Scan(&id))
		want = append(want, id)
	}
	history := func() []int64 {
		t.Helper()
		events, err := st.EventListByTask(ctx, 42)
		require.NoError(t, err)
		var ids []int64
		for _, e := range events {
			ids = append(ids, e.ID)
		}
		return ids
	}
	require.Equal(t, want, history())

	_, err = r.Up(ctx, 1)
	require.NoError(t, err)
	byTask := func(partition string) []string {
		t.Helper()
		return queryStrings(t, db.SQL, `
SELECT ic.relname || ' ' || am.amname FROM pg_index x
JOIN pg_class ic ON ic.oid = x.indexrelid JOIN pg_am am ON am.oid = ic.relam
JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0]
WHERE x.indrelid = ('cairn.' || $1)::regclass AND a.attname = 'task_id' AND x.indisvalid
ORDER BY 1`, partition)
	}
	old, today := store.HistoryDayName(past), store.HistoryDayName(now)
	require.Equal(t, []string{old + "_task btree", old + "_task_id_idx brin"}, byTask(old), "a day that is over")
	require.Equal(t, []string{"task_events_default_task btree", "task_events_default_task_id_idx brin"}, byTask("task_events_default"))
	require.Equal(t, []string{today + "_task_id_idx brin"}, byTask(today), "today's: the BRIN only")
	require.Equal(t, want, history())

	reverted, err := r.Down(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "history_brin", reverted[0].Name)
	require.Equal(t, before, schemaDump(t, db.SQL, "cairn"))
	require.Equal(t, want, history())
	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
}
