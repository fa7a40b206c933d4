package ceiling_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/cmd/bench/internal/ceiling"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgcluster"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	db *pgtest.DB
	st *store.Store
}

func setup(t *testing.T) bundle {
	t.Helper()
	db := pgtest.New(t)
	st, err := store.New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	require.NoError(t, st.QueueEnsure(context.Background(), []string{"default"}))
	return bundle{db: db, st: st}
}

// single returns n runs of one task each on the default queue.
func single(n int) []store.RunInsertParams {
	ps := make([]store.RunInsertParams, n)
	for i := range ps {
		ps[i] = store.RunInsertParams{Workflow: "one", Input: json.RawMessage(`{}`), Queue: "default",
			Tasks: []store.TaskTemplate{{Idx: 0, Name: "only", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}}}}
	}
	return ps
}

// runPgbench runs script with clients × perClient transactions on b's
// database and returns pgbench's output.
func runPgbench(t *testing.T, b bundle, script ceiling.Script, clients, perClient int) string {
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
	script, err := ceiling.Cairn(b.st, ceiling.Params{Queue: "default", Batch: batch, Lease: time.Minute})
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
	// These are fast runs (migration 019): their rows are never written,
	// the view runs reads them from their tasks.
	require.Equal(t, 40, countRows(t, b, `SELECT count(*) FROM cairn.run_rows WHERE status = 'pending' AND started_at IS NULL`))
	require.Equal(t, completed, countRows(t, b, `SELECT count(*) FROM cairn.runs WHERE status = 'completed' AND done_tasks = 1 AND finished_at IS NOT NULL`))
	require.Equal(t, clients*batch, countRows(t, b, `SELECT count(*) FROM cairn.runs WHERE status = 'running' AND started_at IS NOT NULL`))
}

// keyed returns n runs of one task each on the default queue, limited
// to max running per tenant, run i's tenant being i % tenants.
func keyed(n, tenants, max int) []store.RunInsertParams {
	ps := single(n)
	for i := range ps {
		ps[i].Input = json.RawMessage(`{"tenant":"t` + strconv.Itoa(i%tenants) + `"}`)
		ps[i].Tasks[0].Concurrency = &store.FlowTemplate{Group: "one.only", Path: []string{"tenant"}, Max: max}
	}
	return ps
}

func TestPgbenchCairnKeyedTakesTurnsAndKeepsLimits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const clients, perClient, batch = 2, 3, 4
	// Tenant t0 has 32 tasks, enqueued first, t1 and t2 two each; at most
	// 3 run at once per tenant.
	ps := append(keyed(30, 1, 3), keyed(6, 3, 3)...)
	_, err := b.st.RunInsertMany(ctx, ps)
	require.NoError(t, err)
	script, err := ceiling.CairnKeyed(b.st, ceiling.Params{Queue: "default", Batch: batch, Lease: time.Minute})
	require.NoError(t, err)
	runPgbench(t, b, script, clients, perClient)

	// Each claim moves ready tasks to running with their events, and
	// never more than a key's limit run at once.
	claimed := countRows(t, b, `SELECT count(*) FROM cairn.task_events WHERE from_status = 'ready' AND to_status = 'running' AND worker_id IN (1, 2)`)
	require.Greater(t, claimed, clients*batch, "the clients claimed more than one batch each")
	require.Equal(t, claimed-countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE status = 'running'`),
		countRows(t, b, `SELECT count(*) FROM cairn.task_events WHERE from_status = 'running' AND to_status = 'completed' AND worker_id IN (1, 2)`))
	require.Zero(t, countRows(t, b, `SELECT count(*) FROM (SELECT conc_key FROM cairn.tasks WHERE status = 'running' GROUP BY conc_key HAVING count(*) > 3) x`))
	// Turns: t1 and t2 had tasks claimed, though t0's came first.
	require.Equal(t, 3, countRows(t, b, `SELECT count(DISTINCT conc_key) FROM cairn.tasks WHERE status <> 'ready'`))
}

func TestPgbenchBareMovesOnlyTaskRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const clients, perClient, batch = 2, 3, 5
	_, err := b.st.RunInsertMany(ctx, single(40))
	require.NoError(t, err)
	events := countRows(t, b, `SELECT count(*) FROM cairn.task_events`)
	script, err := ceiling.Bare(b.st, ceiling.Params{Queue: "default", Batch: batch, Lease: time.Minute})
	require.NoError(t, err)
	runPgbench(t, b, script, clients, perClient)

	require.Equal(t, clients*(perClient-1)*batch, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE status = 'completed' AND worker_id IS NULL`))
	require.Equal(t, batch, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE status = 'running' AND worker_id = 1 AND attempt = 1`))
	require.Equal(t, batch, countRows(t, b, `SELECT count(*) FROM cairn.tasks WHERE status = 'running' AND worker_id = 2 AND attempt = 1`))
	require.Equal(t, events, countRows(t, b, `SELECT count(*) FROM cairn.task_events`), "the bare floor writes no events")
	require.Equal(t, 40, countRows(t, b, `SELECT count(*) FROM cairn.run_rows WHERE status = 'pending'`), "the bare floor leaves runs alone")
}

// The bare floor's claim must be able to walk tasks_claim (its WHERE
// implies the index's predicate): otherwise every claim sorts the whole
// ready set and the "floor" measures that sort (10,000 tasks/s against
// 38,000, as it did from migration 009 until the claim named fair_key).
func TestPgbenchBareClaimWalksTheClaimIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	script, err := ceiling.Bare(b.st, ceiling.Params{Queue: "default", Batch: 5, Lease: time.Minute})
	require.NoError(t, err)
	_, rest, ok := strings.Cut(script.Text, "WITH c AS MATERIALIZED (")
	require.True(t, ok, script.Text)
	claim, _, ok := strings.Cut(rest, "\n)")
	require.True(t, ok, script.Text)
	claim = strings.ReplaceAll(claim, ":queue", "'default'")

	tx, err := b.db.SQL.Begin()
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.Exec(`SET LOCAL enable_seqscan = off; SET LOCAL enable_sort = off`)
	require.NoError(t, err)
	rows, err := tx.Query("EXPLAIN " + claim)
	require.NoError(t, err)
	defer rows.Close()
	var plan strings.Builder
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan.WriteString(line + "\n")
	}
	require.NoError(t, rows.Err())
	require.Contains(t, plan.String(), "tasks_claim", "plan:\n%s", plan.String())
}

func TestPgbenchParamsRefusesBadInput(t *testing.T) {
	t.Parallel()
	st, err := store.New(nil, "cairn")
	require.NoError(t, err)
	for name, p := range map[string]ceiling.Params{
		"batch": {Queue: "default", Batch: 0, Lease: time.Minute},
		"queue": {Queue: "", Batch: 1, Lease: time.Minute},
		"lease": {Queue: "default", Batch: 1, Lease: 0},
	} {
		_, err := ceiling.Cairn(st, p)
		require.ErrorIs(t, err, ceiling.ErrInvalidParams, name)
		require.ErrorContains(t, err, name)
		_, err = ceiling.Bare(st, p)
		require.ErrorIs(t, err, ceiling.ErrInvalidParams, name)
	}
}
