package migrations_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// Migration 032 adds rerun_of and rerun_from to run_rows and at the end
// of runs; down restores 029's runs, up again the same schema. A rerun
// inserted in between (store.RunRerun) reads true through the view, and
// the runs stay readable through down and up.
func TestRerunMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	r, err := migrations.NewRunner(db.SQL, "cairn")
	require.NoError(t, err)
	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
	upDump := schemaDump(t, db.SQL, "cairn")

	st, err := store.New(db.SQL, "cairn")
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(ctx, []string{"default"}))
	three := []store.TaskTemplate{{Idx: 0, Name: "a", MaxAttempts: 1, Deps: []int{}, Dependents: []int{1}},
		{Idx: 1, Name: "b", MaxAttempts: 1, Deps: []int{0}, Dependents: []int{2}},
		{Idx: 2, Name: "c", MaxAttempts: 1, Deps: []int{1}, Dependents: []int{}}}
	p := store.RunInsertParams{Workflow: "w", Input: json.RawMessage(`{}`), Queue: "default", Tasks: three}
	orig, err := st.RunInsertMany(ctx, []store.RunInsertParams{p})
	require.NoError(t, err)
	// A rerun from c: a and b created completed, in dependency order
	// whatever the order given.
	id, err := st.RunRerun(ctx, store.RunRerunParams{Run: p, Of: orig[0].ID, From: "c", Detail: json.RawMessage(`{"reason": "rerun"}`),
		Done: []store.RerunDone{{Idx: 1, Output: json.RawMessage(`{"b": 1}`)}, {Idx: 0, Output: json.RawMessage(`{"a": 1}`)}}})
	require.NoError(t, err)
	var of int64
	var from, status, cStatus string
	var done int
	require.NoError(t, db.SQL.QueryRow(`SELECT rerun_of, rerun_from, status, done_tasks FROM cairn.runs WHERE id = $1`, id).Scan(&of, &from, &status, &done))
	require.Equal(t, orig[0].ID, of)
	require.Equal(t, "c", from)
	require.Equal(t, store.RunRunning, status)
	require.Equal(t, 2, done)
	require.NoError(t, db.SQL.QueryRow(`SELECT status FROM cairn.tasks WHERE run_id = $1 AND name = 'c'`, id).Scan(&cStatus))
	require.Equal(t, store.StatusReady, cStatus)
	pgtest.CheckRelations(t, db.SQL, "rerun inserted")

	// Down to and including 032, whatever came after it.
	all, err := migrations.All()
	require.NoError(t, err)
	back := len(all) - position(t, "rerun")
	reverted, err := r.Down(ctx, back)
	require.NoError(t, err)
	require.Equal(t, "rerun", reverted[back-1].Name)
	var n int
	require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM cairn.runs`).Scan(&n))
	require.Equal(t, 2, n)
	require.Error(t, db.SQL.QueryRow(`SELECT rerun_of FROM cairn.runs LIMIT 1`).Scan(new(any)), "down drops the column")

	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, upDump, schemaDump(t, db.SQL, "cairn"))
	require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM cairn.runs WHERE rerun_of IS NULL`).Scan(&n))
	require.Equal(t, 2, n)
}
