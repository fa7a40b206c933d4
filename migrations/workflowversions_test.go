package migrations_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store/pgtest"
)

// Migration 031 adds the view cairn_workflow_versions over the versions
// 029 stores; down drops the view and keeps the versions, up again reads
// them.
func TestWorkflowVersionsViewMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	r, err := migrations.NewRunner(db.SQL, "cairn")
	require.NoError(t, err)
	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
	_, err = db.SQL.Exec(`INSERT INTO cairn.workflow_versions (workflow, version, definition, templates, registered_at)
		VALUES ('wf', 'v1', '{}', '[]', now() - interval '1 hour'), ('wf', 'v2', '{}', '[]', now())`)
	require.NoError(t, err)
	answer := func() string {
		var s string
		require.NoError(t, db.SQL.QueryRow(`SELECT string_agg(version || ' ' || newest || ' ' || retirable, ', ' ORDER BY version)
			FROM cairn.cairn_workflow_versions`).Scan(&s))
		return s
	}
	require.Equal(t, "v1 false true, v2 true false", answer())

	all, err := migrations.All()
	require.NoError(t, err)
	n := len(all) - position(t, "workflow_versions_view")
	reverted, err := r.Down(ctx, n)
	require.NoError(t, err)
	require.Equal(t, "workflow_versions_view", reverted[n-1].Name)
	var gone bool
	require.NoError(t, db.SQL.QueryRow(`SELECT to_regclass('cairn.cairn_workflow_versions') IS NULL`).Scan(&gone))
	require.True(t, gone, "down: the view is gone")
	var kept int
	require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM cairn.workflow_versions`).Scan(&kept))
	require.Equal(t, 2, kept, "down: the versions are kept")

	_, err = r.Up(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, "v1 false true, v2 true false", answer(), "up again")
}
