package store_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgcluster"
)

// runPgbench runs script with clients × perClient transactions on b's
// database and returns pgbench's output.
func runPgbench(t *testing.T, b bundle, script store.PgbenchScript, clients, perClient int) string {
	t.Helper()
	pgbench, err := pgcluster.FindProgram("pgbench")
	if err != nil {
		t.Skip(err)
	}
	file := filepath.Join(t.TempDir(), "script.sql")
	require.NoError(t, os.WriteFile(file, []byte(script.Text), 0o600))
	args := append([]string{"-n", "-M", "prepared", "-c", strconv.Itoa(clients), "-t", strconv.Itoa(perClient), "-f", file}, script.Args()...)
	out, err := exec.Command(pgbench, append(args, b.db.URL)...).CombinedOutput()
	require.NoError(t, err, "pgbench: %s", out)
	return string(out)
}

func countRows(t *testing.T, b bundle, query string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.SQL.QueryRow(query).Scan(&n), query)
	return n
}

func TestPgbenchCairnDoesTheCompletersWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const clients, perClient, batch = 2, 3, 5
	_, err := b.st.RunInsertMany(ctx, single(40))
	require.NoError(t, err)
	script, err := b.st.PgbenchCairn(store.PgbenchParams{Queue: "default", Batch: batch, Lease: time.Minute})
	require.NoError(t, err)
	runPgbench(t, b, script, clients, perClient)

	// Each transaction claims a batch; each but a client's last completes
	// the batch its previous one claimed.
	completed := clients * (perClient - 1) * batch
	require.Equal(t, completed, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE status = 'completed' AND worker_id IS NULL AND finished_at IS NOT NULL`))
	require.Equal(t, clients*batch, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE status = 'running'`))
	require.Equal(t, batch, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE status = 'running' AND worker_id = 1`))
	require.Equal(t, batch, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE status = 'running' AND worker_id = 2`))
	require.Equal(t, 40-clients*perClient*batch, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE status = 'ready'`))
	// Cairn's events and run rows, as its statements write them.
	require.Equal(t, clients*perClient*batch, countRows(t, b, `SELECT count(*) FROM cairn.task_events WHERE from_status = 'ready' AND to_status = 'running' AND worker_id IN (1, 2)`))
	require.Equal(t, completed, countRows(t, b, `SELECT count(*) FROM cairn.task_events WHERE from_status = 'running' AND to_status = 'completed' AND worker_id IN (1, 2)`))
	require.Equal(t, completed, countRows(t, b, `SELECT count(*) FROM cairn.runs WHERE status = 'completed' AND done_tasks = 1 AND finished_at IS NOT NULL`))
	require.Equal(t, clients*batch, countRows(t, b, `SELECT count(*) FROM cairn.runs WHERE status = 'running'`))
}

func TestPgbenchBareMovesOnlyTaskRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const clients, perClient, batch = 2, 3, 5
	_, err := b.st.RunInsertMany(ctx, single(40))
	require.NoError(t, err)
	events := countRows(t, b, `SELECT count(*) FROM cairn.task_events`)
	script, err := b.st.PgbenchBare(store.PgbenchParams{Queue: "default", Batch: batch, Lease: time.Minute})
	require.NoError(t, err)
	runPgbench(t, b, script, clients, perClient)

	require.Equal(t, clients*(perClient-1)*batch, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE status = 'completed' AND worker_id IS NULL`))
	require.Equal(t, batch, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE status = 'running' AND worker_id = 1 AND attempt = 1`))
	require.Equal(t, batch, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE status = 'running' AND worker_id = 2 AND attempt = 1`))
	require.Equal(t, events, countRows(t, b, `SELECT count(*) FROM cairn.task_events`), "the bare floor writes no events")
	require.Equal(t, 40, countRows(t, b, `SELECT count(*) FROM cairn.runs WHERE status = 'pending'`), "the bare floor leaves runs alone")
}

func TestPgbenchParamsRefusesBadInput(t *testing.T) {
	t.Parallel()
	st, err := store.New(nil, "cairn")
	require.NoError(t, err)
	for name, p := range map[string]store.PgbenchParams{
		"batch": {Queue: "default", Batch: 0, Lease: time.Minute},
		"queue": {Queue: "", Batch: 1, Lease: time.Minute},
		"lease": {Queue: "default", Batch: 1, Lease: 0},
	} {
		_, err := st.PgbenchCairn(p)
		require.ErrorIs(t, err, store.ErrInvalidValue, name)
		require.ErrorContains(t, err, name)
		_, err = st.PgbenchBare(p)
		require.ErrorIs(t, err, store.ErrInvalidValue, name)
	}
}
