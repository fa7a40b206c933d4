package store_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// taskIndexes returns, for each partition of task_events, the access
// methods of its indexes on task_id ("btree", "brin"), sorted, and
// whether each is valid.
func (b bundle) taskIndexes(t *testing.T) map[string][]string {
	t.Helper()
	rows, err := b.db.SQL.Query(`
SELECT c.relname, am.amname || CASE WHEN x.indisvalid THEN '' ELSE ' (invalid)' END
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_index x ON x.indrelid = c.oid
JOIN pg_class ic ON ic.oid = x.indexrelid
JOIN pg_am am ON am.oid = ic.relam
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = x.indkey[0]
WHERE i.inhparent = 'cairn.task_events'::regclass AND a.attname = 'task_id'`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var p, am string
		require.NoError(t, rows.Scan(&p, &am))
		out[p] = append(out[p], am)
	}
	require.NoError(t, rows.Err())
	for _, v := range out {
		sort.Strings(v)
	}
	return out
}

// pastDays makes the partitions of the n days that ended before
// yesterday and returns the database's now and the first of those days.
func (b bundle) pastDays(t *testing.T, n int) (now, past time.Time) {
	t.Helper()
	now = b.dbNow(t)
	past = now.Add(-time.Duration(n+1) * day).UTC().Truncate(day)
	_, err := b.st.HistoryPartitionEnsure(context.Background(), past, n)
	require.NoError(t, err)
	return now, past
}

// A partition whose day is over gets its B-tree by task, once; the
// partitions still written to keep the BRIN only; an index a cancelled
// build left invalid is built again; and a task's history reads the same
// through either.
func TestHistoryPartitionIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	now, past := b.pastDays(t, 2)
	old, older := store.HistoryDayName(past), store.HistoryDayName(past.Add(day))
	today := store.HistoryDayName(now)

	// Events need no task or run row (no foreign key).
	const run, task = 7, 42
	want := []int64{b.addEvent(t, run, task, past.Add(time.Hour)), b.addEvent(t, run, task, now)}
	// Two events of one task in the newer past day, for the unique index
	// below to fail on.
	b.addEvent(t, run, task+1, past.Add(day+time.Hour))
	b.addEvent(t, run, task+1, past.Add(day+2*time.Hour))

	idx := b.taskIndexes(t)
	require.Equal(t, []string{"brin"}, idx[old], "a new partition has the BRIN only")
	require.Equal(t, []string{"brin"}, idx[today])
	require.Equal(t, []string{"brin", "btree"}, idx["task_events_default"], "DEFAULT has its B-tree since the migration")

	// A build cancelled half-way leaves an invalid index of that name.
	_, err := b.db.SQL.Exec(`CREATE UNIQUE INDEX CONCURRENTLY ` + older + `_task ON cairn.` + older + ` (task_id)`)
	require.Error(t, err, "duplicate task ids")
	require.Equal(t, []string{"brin", "btree (invalid)"}, b.taskIndexes(t)[older])

	built, err := b.st.HistoryPartitionIndex(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{old + "_task", older + "_task"}, built)
	idx = b.taskIndexes(t)
	require.Equal(t, []string{"brin", "btree"}, idx[old])
	require.Equal(t, []string{"brin", "btree"}, idx[older], "the invalid one was built again")
	require.Equal(t, []string{"brin"}, idx[today], "today's is still written to")

	built, err = b.st.HistoryPartitionIndex(ctx)
	require.NoError(t, err)
	require.Empty(t, built, "once")

	events, err := b.st.EventListByTask(ctx, task)
	require.NoError(t, err)
	require.Equal(t, want, eventIDs(events))
}

// eventIDs returns the ids of events, in order.
func eventIDs(events []store.Event) []int64 {
	var ids []int64
	for _, e := range events {
		ids = append(ids, e.ID)
	}
	return ids
}

// The BRIN on task_id of today's partition gets its new ranges summarized;
// a second pass finds nothing new; a task's events are found through the
// summaries.
func TestHistorySummarize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	// About 200 pages of events of 5,000 tasks, in id order as the engine
	// writes them.
	_, err := b.db.SQL.Exec(`INSERT INTO cairn.task_events (run_id, task_id, from_status, to_status, detail)
		SELECT g / 4, 1000 + g / 4, 'ready', 'running', jsonb_build_object('pad', repeat('x', 60)) FROM generate_series(0, 19999) g`)
	require.NoError(t, err)
	n, err := b.st.HistorySummarize(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, int64(4), "the ranges of today's partition's BRIN on task_id")
	n, err = b.st.HistorySummarize(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing new")

	events, err := b.st.EventListByTask(ctx, 1000+2500)
	require.NoError(t, err)
	require.Len(t, events, 4)
	for _, e := range events {
		require.Equal(t, int64(3500), e.TaskID)
	}
}

// A run's events are read through the range of its task ids with the ids
// as a filter (runEventsWhere): another run whose ids interleave with its
// own contributes nothing, in every partition kind.
func TestRunEventsInterleavedIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	now, past := b.pastDays(t, 1)
	_, err := b.st.HistoryPartitionIndex(ctx)
	require.NoError(t, err)

	// Hand-written runs (a run lists its tasks' ids, migration 022);
	// events need no task rows.
	runOf := func(ids string) int64 {
		t.Helper()
		var id int64
		require.NoError(t, b.db.SQL.QueryRow(`INSERT INTO cairn.run_rows (workflow, input, queue, task_count, task_ids)
			VALUES ('wf', '{}', 'default', 3, $1) RETURNING id`, ids).Scan(&id))
		return id
	}
	a, other := runOf("{9000,9002,9004}"), runOf("{9001,9003}")
	var want []int64
	for _, at := range []time.Time{past.Add(time.Hour), now} { // a past day (B-tree) and today (BRIN)
		for _, task := range []int64{9000, 9001, 9002, 9003, 9004} {
			run := a
			if task%2 == 1 {
				run = other
			}
			id := b.addEvent(t, run, task, at)
			if run == a {
				want = append(want, id)
			}
		}
	}

	events, err := b.st.EventListByRun(ctx, a)
	require.NoError(t, err)
	require.Equal(t, want, eventIDs(events))

	recent, err := b.st.EventListByRunRecent(ctx, a, 4)
	require.NoError(t, err)
	require.Equal(t, want[len(want)-4:], eventIDs(recent), "the latest four, oldest first")

	trs, err := b.st.RunTransitionList(ctx, a)
	require.NoError(t, err)
	require.Len(t, trs, 3)
	for _, task := range []int64{9000, 9002, 9004} {
		require.Len(t, trs[task], 2, "task %d: one event in each partition", task)
	}
}
