package migrations_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// eventRows reads every event (and the attempts view over them) as text,
// in id order, so two states can be compared row for row.
func eventRows(t *testing.T, db *sql.DB) (events, attempts []string) {
	t.Helper()
	read := func(q string) []string { return queryStrings(t, db, q) }
	events = read(`SELECT concat_ws('|', id, run_id, task_id, coalesce(from_status, '-'), to_status, coalesce(worker_id::text, '-'),
		attempt, extract(epoch FROM at), coalesce(error, '-'), coalesce(detail::text, '-')) FROM cairn.task_events ORDER BY id`)
	attempts = read(`SELECT concat_ws('|', task_id, run_id, attempt, outcome, extract(epoch FROM ended_at), coalesce(error, '-'))
		FROM cairn.cairn_task_attempts ORDER BY task_id, ended_at`)
	return events, attempts
}

// partitionOf names the partitions holding events, by event id.
func partitionOf(t *testing.T, db *sql.DB) map[int64]string {
	t.Helper()
	rows, err := db.Query(`SELECT id, tableoid::regclass::text FROM cairn.task_events`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var part string
		require.NoError(t, rows.Scan(&id, &part))
		out[id] = strings.TrimPrefix(part, "cairn.")
	}
	require.NoError(t, rows.Err())
	return out
}

func dayName(d time.Time) string { return "task_events_" + d.UTC().Format("20060102") }

// An installation with history spanning several days migrates to the
// partitioned task_events and back, and up again, with every event (and
// the attempts view over them) read the same after each step; new events
// still get ids from the same sequence.
func TestHistoryPartitionsMigrationKeepsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r := upTo(t, "history_partitions")
	plain := schemaDump(t, db.SQL, "cairn")

	// Three runs through the store, their events spread over the last six
	// days, attempts with errors and details, and one event stamped two
	// days ahead (a clock ahead).
	st, err := store.New(db.SQL, "cairn")
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(ctx, []string{"default"}))
	ps := make([]store.RunInsertParams, 3)
	for i := range ps {
		ps[i] = store.RunInsertParams{Workflow: "wf", Input: json.RawMessage(`{}`), Queue: "default",
			Tasks: []store.TaskTemplate{{Idx: 0, Name: "a", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{1}},
				{Idx: 1, Name: "b", MaxAttempts: 3, MaxRescues: 3, Deps: []int{0}, Dependents: []int{}}}}
	}
	exec := func(q string, args ...any) {
		t.Helper()
		_, err := db.SQL.Exec(q, args...)
		require.NoError(t, err)
	}
	// This version's store reads event_listeners (migration 018) and
	// writes tasks.run_fast (019) and runs.task_ids (022) when it
	// inserts, into run_rows (024); the older schema gets them for the inserts only.
	exec(`CREATE TABLE cairn.event_listeners (holder text PRIMARY KEY, expires_at timestamptz NOT NULL)`)
	exec(`ALTER TABLE cairn.tasks ADD COLUMN run_fast boolean NOT NULL DEFAULT false`)
	exec(`ALTER TABLE cairn.runs ADD COLUMN task_ids bigint[] NOT NULL DEFAULT '{}'`)
	undo := runRowsAsIn024(t, db.SQL)
	undoFunctions := runInsertAsIn035(t, db.SQL)
	runs, err := st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	undoFunctions()
	undo()
	exec(`DROP TABLE cairn.event_listeners`)
	exec(`ALTER TABLE cairn.tasks DROP COLUMN run_fast`)
	exec(`ALTER TABLE cairn.runs DROP COLUMN task_ids`)
	for i, run := range runs {
		exec(`INSERT INTO cairn.task_events (run_id, task_id, from_status, to_status, worker_id, attempt, at, error, detail)
			SELECT t.run_id, t.id, s.f, s.t, 7, s.a, now() - make_interval(days => $2 + s.n), s.e, s.d::jsonb
			FROM cairn.tasks t CROSS JOIN (VALUES
				(NULL, 'ready', 0, 0, NULL, NULL),
				('ready', 'running', 1, 1, NULL, NULL),
				('running', 'ready', 1, 1, 'boom', '{"log": ["line 1"]}'),
				('ready', 'running', 2, 2, NULL, NULL),
				('running', 'completed', 2, 2, NULL, '{"log": []}')) s(f, t, a, n, e, d)
			WHERE t.run_id = $1`, run.ID, 3-i)
	}
	exec(`INSERT INTO cairn.task_events (run_id, task_id, to_status, at) VALUES ($1, 1, 'ready', now() + interval '2 days')`, runs[0].ID)
	wantEvents, wantAttempts := eventRows(t, db.SQL)
	require.Len(t, wantEvents, 3*2*5+1)
	require.Len(t, wantAttempts, 3*2*2)

	var now time.Time
	require.NoError(t, db.SQL.QueryRow(`SELECT now()`).Scan(&now))
	today := now.UTC().Truncate(24 * time.Hour)
	partitioned := func(step string) {
		t.Helper()
		var kind string
		require.NoError(t, db.SQL.QueryRow(`SELECT relkind::text FROM pg_class WHERE oid = 'cairn.task_events'::regclass`).Scan(&kind))
		require.Equal(t, "p", kind, step)
		events, attempts := eventRows(t, db.SQL)
		require.Equal(t, wantEvents, events, step)
		require.Equal(t, wantAttempts, attempts, step)
		where := partitionOf(t, db.SQL)
		parts := map[string]int{}
		for _, p := range where {
			parts[p]++
		}
		require.Equal(t, map[string]int{"task_events_migrated": len(wantEvents) - 1, dayName(today.Add(48 * time.Hour)): 1}, parts,
			"%s: the old rows stay in the attached table, the one ahead moved to its day", step)
		dump := schemaDump(t, db.SQL, "cairn")
		for d := 1; d <= 3; d++ {
			require.Contains(t, dump, "idx "+dayName(today.Add(time.Duration(d)*24*time.Hour))+"_task_id_id_idx", step)
		}
		require.Contains(t, dump, "idx task_events_default_at_idx CREATE INDEX task_events_default_at_idx ON cairn.task_events_default USING brin (at)", step)
		require.Contains(t, dump, "idx task_events_migrated_task CREATE INDEX task_events_migrated_task ON cairn.task_events_migrated USING btree (task_id, id)", step)
	}

	applied, err := r.Up(ctx, 1)
	require.NoError(t, err)
	require.Len(t, applied, 1)
	partitioned("up")

	// New events: one now (the attached table covers today), one far
	// ahead of any partition (the DEFAULT one); the sequence goes on.
	var lastID int64
	require.NoError(t, db.SQL.QueryRow(`SELECT max(id) FROM cairn.task_events`).Scan(&lastID))
	var nowID, oldID int64
	require.NoError(t, db.SQL.QueryRow(`INSERT INTO cairn.task_events (run_id, task_id, to_status) VALUES ($1, 1, 'ready') RETURNING id`, runs[1].ID).Scan(&nowID))
	require.NoError(t, db.SQL.QueryRow(`INSERT INTO cairn.task_events (run_id, task_id, to_status, at) VALUES ($1, 1, 'ready', now() + interval '1 year') RETURNING id`, runs[1].ID).Scan(&oldID))
	require.Greater(t, nowID, lastID)
	where := partitionOf(t, db.SQL)
	require.Equal(t, "task_events_migrated", where[nowID])
	require.Equal(t, "task_events_default", where[oldID])
	exec(`DELETE FROM cairn.task_events WHERE id IN ($1, $2)`, nowID, oldID)

	reverted, err := r.Down(ctx, 1)
	require.NoError(t, err)
	require.Len(t, reverted, 1)
	require.Equal(t, plain, schemaDump(t, db.SQL, "cairn"), "down: the plain table as before")
	events, attempts := eventRows(t, db.SQL)
	require.Equal(t, wantEvents, events, "down")
	require.Equal(t, wantAttempts, attempts, "down")
	var downID int64
	require.NoError(t, db.SQL.QueryRow(`INSERT INTO cairn.task_events (run_id, task_id, to_status) VALUES ($1, 1, 'ready') RETURNING id`, runs[2].ID).Scan(&downID))
	require.Greater(t, downID, oldID, "down: the sequence goes on")
	exec(`DELETE FROM cairn.task_events WHERE id = $1`, downID)

	_, err = r.Up(ctx, 1)
	require.NoError(t, err)
	partitioned("up again")
}

// A new installation gets today's partition and the next three days',
// the DEFAULT one, and no attached old table.
func TestHistoryPartitionsFreshInstall(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	rows, err := db.SQL.Query(`SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'cairn.task_events'::regclass ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	var got []string
	for rows.Next() {
		var name, bound string
		require.NoError(t, rows.Scan(&name, &bound))
		got = append(got, name+" "+bound)
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, 5)
	require.Equal(t, "task_events_default DEFAULT", got[4])
	var first time.Time
	require.NoError(t, db.SQL.QueryRow(`SELECT min(lo) FROM (SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz AS lo
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'cairn.task_events'::regclass) x`).Scan(&first))
	for d := range 4 {
		require.True(t, strings.HasPrefix(got[d], dayName(first.Add(time.Duration(d)*24*time.Hour))+" FOR VALUES FROM"), fmt.Sprint(got))
	}
}
