package migrations_test

import (
	"context"
	"database/sql"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// schemaDump describes every table, column, index, constraint, view and
// trigger of a schema, so two states can be compared.
func schemaDump(t *testing.T, db *sql.DB, schema string) string {
	t.Helper()
	out := queryStrings(t, db, `
		SELECT 'col ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
		FROM information_schema.columns WHERE table_schema = $1
		UNION ALL SELECT 'idx ' || indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = $1
		UNION ALL SELECT 'con ' || conname || ' ' || pg_get_constraintdef(c.oid)
		  FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE n.nspname = $1
		UNION ALL SELECT 'view ' || viewname || ' ' || definition FROM pg_views WHERE schemaname = $1
		UNION ALL SELECT 'opt ' || c.relname || ' ' || array_to_string(c.reloptions, ',')
		  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.reloptions IS NOT NULL
		UNION ALL SELECT 'trg ' || t.tgname || ' ' || pg_get_triggerdef(t.oid)
		  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		  WHERE n.nspname = $1 AND NOT t.tgisinternal`, schema)
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// queryStrings runs q, whose rows are one text column each, and returns
// them in order.
func queryStrings(t *testing.T, db *sql.DB, q string, args ...any) []string {
	t.Helper()
	rows, err := db.Query(q, args...)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(t, rows.Err())
	return out
}

// upTo returns a fresh database whose schema is migrated up to just
// before the migration called name, and the runner that did it.
func upTo(t *testing.T, name string) (*pgtest.DB, *migrations.Runner) {
	t.Helper()
	db := pgtest.NewEmpty(t)
	r, err := migrations.NewRunner(db.SQL, "cairn")
	require.NoError(t, err)
	_, err = r.Up(context.Background(), position(t, name))
	require.NoError(t, err)
	return db, r
}

// runRowsAsIn024 gives a schema older than migration 024 the table name
// this version's store writes (run_rows, with runs a plain view of it,
// which inserts, updates and deletes pass through), and the version
// columns of 029 its inserts write and its claims read, for a test that
// drives the store against the older schema; the returned func undoes it.
func runRowsAsIn024(t *testing.T, db *sql.DB) (undo func()) {
	t.Helper()
	_, err := db.Exec(`ALTER TABLE cairn.runs ADD COLUMN version text; ALTER TABLE cairn.tasks ADD COLUMN version text;
		ALTER TABLE cairn.workers ADD COLUMN versions text[];
		ALTER TABLE cairn.runs RENAME TO run_rows; CREATE VIEW cairn.runs AS SELECT * FROM cairn.run_rows`)
	require.NoError(t, err)
	return func() {
		t.Helper()
		_, err := db.Exec(`DROP VIEW cairn.runs; ALTER TABLE cairn.run_rows RENAME TO runs;
			ALTER TABLE cairn.runs DROP COLUMN version; ALTER TABLE cairn.tasks DROP COLUMN version;
			ALTER TABLE cairn.workers DROP COLUMN versions`)
		require.NoError(t, err)
	}
}

// runInsertAsIn035 gives a schema older than migration 035 the functions
// this version's store calls to insert runs (run_insert_once and
// run_insert, as 035 creates them), for a test that drives the store
// against the older schema; the returned func drops them.
func runInsertAsIn035(t *testing.T, db *sql.DB) (undo func()) {
	t.Helper()
	all, err := migrations.All()
	require.NoError(t, err)
	up := all[position(t, "sql_api")].Up
	create := func(name string) string {
		i := strings.Index(up, "CREATE FUNCTION "+name+"(")
		require.GreaterOrEqual(t, i, 0, name)
		j := strings.Index(up[i:], "\n$fn$;\n")
		require.GreaterOrEqual(t, j, 0, name)
		return up[i : i+j+len("\n$fn$;")]
	}
	tx, err := db.Begin()
	require.NoError(t, err)
	defer tx.Rollback() //nolint:errcheck
	for _, q := range []string{"SET LOCAL search_path TO cairn", create("run_insert_once"), create("run_insert")} {
		_, err := tx.Exec(q)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit())
	return func() {
		t.Helper()
		_, err := db.Exec(`DROP FUNCTION cairn.run_insert(jsonb, jsonb, boolean); DROP FUNCTION cairn.run_insert_once(jsonb, jsonb, boolean)`)
		require.NoError(t, err)
	}
}

// position returns the index in migrations.All() of the migration
// called name, which must exist.
func position(t *testing.T, name string) int {
	t.Helper()
	all, err := migrations.All()
	require.NoError(t, err)
	for i, m := range all {
		if m.Name == name {
			return i
		}
	}
	t.Fatalf("no migration %q", name)
	return -1
}

func TestUpDownUpSameSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	r, err := migrations.NewRunner(db.SQL, "cairn")
	require.NoError(t, err)

	st, err := r.Status(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, st)
	for _, s := range st {
		require.False(t, s.Applied, "migration %d applied on an empty database", s.Version)
	}

	applied, err := r.Up(ctx, 0)
	require.NoError(t, err)
	require.Len(t, applied, len(st))
	first := schemaDump(t, db.SQL, "cairn")
	require.Contains(t, first, "idx tasks_claim")
	require.Contains(t, first, "view cairn_queue_depth")

	_, err = r.Down(ctx, 0)
	require.NoError(t, err)
	var tables int
	require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = 'cairn'`).Scan(&tables))
	require.Zero(t, tables, "down --all left tables behind")

	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, first, schemaDump(t, db.SQL, "cairn"))
}

func TestConcurrentUpIsSafe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := migrations.NewRunner(db.SQL, "cairn")
			if err == nil {
				_, err = r.Up(ctx, 0)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	r, _ := migrations.NewRunner(db.SQL, "cairn")
	pending, err := r.Pending(ctx)
	require.NoError(t, err)
	require.Zero(t, pending)
}

func TestBadSchemaName(t *testing.T) {
	t.Parallel()
	_, err := migrations.NewRunner(nil, "Robert'); DROP")
	require.ErrorIs(t, err, migrations.ErrBadSchema)
}

// The trace migration adds runs.trace_context, nullable, and its down
// step leaves the schema as it was before.
func TestTraceMigrationUpDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r := upTo(t, "trace")
	without := schemaDump(t, db.SQL, "cairn")
	require.NotContains(t, without, "col runs.trace_context")

	applied, err := r.Up(ctx, 1)
	require.NoError(t, err)
	require.Len(t, applied, 1)
	require.Equal(t, "trace", applied[0].Name)
	require.Contains(t, schemaDump(t, db.SQL, "cairn"), "col runs.trace_context text YES")

	reverted, err := r.Down(ctx, 1)
	require.NoError(t, err)
	require.Len(t, reverted, 1)
	require.Equal(t, "trace", reverted[0].Name)
	require.Equal(t, without, schemaDump(t, db.SQL, "cairn"))
}

// Migration 020 leaves half of each tasks page free for the new versions
// of its rows; its down step gives the table the default back.
func TestTasksFillfactorUpDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, r := upTo(t, "tasks_fillfactor")
	without := schemaDump(t, db.SQL, "cairn")
	require.NotContains(t, without, "opt tasks ")

	_, err := r.Up(ctx, 1)
	require.NoError(t, err)
	require.Contains(t, schemaDump(t, db.SQL, "cairn"), "opt tasks fillfactor=50")

	reverted, err := r.Down(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, "tasks_fillfactor", reverted[0].Name)
	require.Equal(t, without, schemaDump(t, db.SQL, "cairn"))
}
