package migrations_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// Migration 034 up, down and up again with a debounced run in the
// tables: down drops the debounce columns from run_rows and runs and
// keeps the run; up again gives the same schema.
func TestDebounceMigration(t *testing.T) {
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
	p := store.RunInsertParams{Workflow: "w", Input: json.RawMessage(`{"n": 1}`), Queue: "default",
		Tasks:    []store.TaskTemplate{{Idx: 0, Name: "a", MaxAttempts: 1, Deps: []int{}, Dependents: []int{}}},
		Debounce: &store.Debounce{Key: "k", Wait: time.Minute, MaxWait: time.Hour}}
	first, err := st.RunInsertMany(ctx, []store.RunInsertParams{p})
	require.NoError(t, err)
	p.Input = json.RawMessage(`{"n": 2}`)
	second, err := st.RunInsertMany(ctx, []store.RunInsertParams{p})
	require.NoError(t, err)
	require.Equal(t, first[0].ID, second[0].ID, "the queued run of the key takes the second enqueue")
	require.Equal(t, []string{`{"n": 2}`}, queryStrings(t, db.SQL, `SELECT input::text FROM cairn.runs`))
	pgtest.CheckRelations(t, db.SQL, "debounced run")

	// Down to and including 034, whatever came after it.
	all, err := migrations.All()
	require.NoError(t, err)
	back := len(all) - position(t, "debounce")
	reverted, err := r.Down(ctx, back)
	require.NoError(t, err)
	require.Equal(t, "debounce", reverted[back-1].Name)
	require.Equal(t, []string{`{"n": 2}`}, queryStrings(t, db.SQL, `SELECT input::text FROM cairn.runs`), "the run stays")
	require.Error(t, db.SQL.QueryRow(`SELECT debounce_key FROM cairn.runs LIMIT 1`).Scan(new(any)), "down drops the columns")

	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, upDump, schemaDump(t, db.SQL, "cairn"))
}
