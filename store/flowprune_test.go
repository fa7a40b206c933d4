package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

// sqlf runs a statement on the test database, %s standing for the schema.
func sqlf(t *testing.T, b bundle, query string, args ...any) {
	t.Helper()
	_, err := b.db.SQL.Exec(fmt.Sprintf(query, pgtest.Schema), args...)
	require.NoError(t, err)
}

// flowKeys returns the flow_keys rows' keys.
func flowKeys(t *testing.T, b bundle) []string {
	t.Helper()
	var keys []string
	require.NoError(t, b.db.SQL.QueryRow(fmt.Sprintf(`SELECT coalesce(array_agg(key ORDER BY key), '{}') FROM %s.flow_keys`, pgtest.Schema)).
		Scan(pq.Array(&keys)))
	return keys
}

// ageFlowKeys marks keys last used three hours ago, past the least idle
// time of a prune.
func ageFlowKeys(t *testing.T, b bundle, keys ...string) {
	t.Helper()
	sqlf(t, b, `UPDATE %s.flow_keys SET updated_at = now() - interval '3 hours' WHERE key = ANY($1)`, pq.Array(keys))
}

// A prune deletes the idle keys no task refers to, in any state, through
// either of its keys, and keeps the rest; the next enqueue of a pruned key
// brings its row back, and its task is claimed under it.
func TestFlowKeyPruneDeletesIdleKeysNoTaskRefersTo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 2}
	rate := &store.FlowTemplate{Group: "api", Path: []string{"t"}, Limit: 5, Per: time.Second}
	key := func(kind byte, group, v string) string { return store.FlowKey(kind, group, v) }
	ins, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{
		keyedTask("w", "default", `{"t": "gone"}`, conc, nil),    // its run is deleted below
		keyedTask("w", "default", `{"t": "done"}`, conc, nil),    // completed, kept
		keyedTask("w", "default", `{"t": "ready"}`, conc, nil),   // ready
		keyedTask("w2", "default", `{"t": "both"}`, conc, rate),  // ready, with a rate key as well
		keyedTask("w", "default", `{"t": "recent"}`, conc, nil),  // deleted, but used lately
		keyedTask("w", "default", `{"t": "recent2"}`, conc, nil), // (its run deleted too)
	})
	require.NoError(t, err)
	all := []string{key('c', "tenant", "gone"), key('c', "tenant", "done"), key('c', "tenant", "ready"), key('c', "tenant", "both"),
		key('r', "api", "both"), key('c', "tenant", "recent"), key('c', "tenant", "recent2")}
	require.ElementsMatch(t, all, flowKeys(t, b))
	ageFlowKeys(t, b, all[:5]...)
	sqlf(t, b, `DELETE FROM %s.run_rows WHERE id = ANY($1)`, pq.Array([]int64{ins[0].ID, ins[4].ID, ins[5].ID}))
	sqlf(t, b, `UPDATE %s.tasks SET status = 'completed', finished_at = now() WHERE run_id = $1`, ins[1].ID)

	_, err = b.st.FlowKeyPrune(ctx, time.Hour, 100)
	require.Error(t, err, "an idle time under the least is refused")
	_, err = b.st.FlowKeyPrune(ctx, 2*time.Hour, 0)
	require.Error(t, err, "a batch of 0 is refused")

	n, err := b.st.FlowKeyPrune(ctx, 2*time.Hour, 100)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.ElementsMatch(t, all[1:], flowKeys(t, b), "only the idle key of a deleted run went")

	// The key comes back with its limit when a task uses it again, and
	// that task is claimed under it.
	again := insertRuns(t, b, keyedTask("w", "default", `{"t": "gone"}`, conc, nil))
	require.Contains(t, flowKeys(t, b), all[0])
	var limit int
	require.NoError(t, b.db.SQL.QueryRow(fmt.Sprintf(`SELECT max_running FROM %s.flow_keys WHERE key = $1`, pgtest.Schema), all[0]).Scan(&limit))
	require.Equal(t, 2, limit)
	sqlf(t, b, `UPDATE %s.tasks SET status = 'cancelled' WHERE run_id <> (SELECT run_id FROM %[1]s.tasks WHERE id = $1)`, again[0])
	w, err := b.st.WorkerInsert(ctx, "w", map[string]int{"default": 10})
	require.NoError(t, err)
	got, err := b.st.TaskClaim(ctx, store.ClaimParams{WorkerID: w, Queues: []string{"default"}, Limits: []int{10}, Lease: time.Hour, Keyed: true})
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, again[0], got[0].ID)
}

// keyWithoutTasks enqueues a run whose task has the concurrency key
// value v under conc, deletes the run, and returns the key: a flow_keys
// row that no task refers to.
func keyWithoutTasks(t *testing.T, b bundle, conc *store.FlowTemplate, v string) string {
	t.Helper()
	ins, err := b.st.RunInsertMany(context.Background(), []store.RunInsertParams{keyedTask("w", "default", `{"t": "`+v+`"}`, conc, nil)})
	require.NoError(t, err)
	sqlf(t, b, `DELETE FROM %s.run_rows WHERE id = $1`, ins[0].ID)
	return store.FlowKey('c', conc.Group, v)
}

// keyRowLocked reports whether another transaction holds a lock on key's
// flow_keys row.
func keyRowLocked(t *testing.T, b bundle, key string) bool {
	t.Helper()
	tx, err := b.db.SQL.Begin()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var got string
	err = tx.QueryRow(fmt.Sprintf(`SELECT key FROM %s.flow_keys WHERE key = $1 FOR UPDATE NOWAIT`, pgtest.Schema), key).Scan(&got)
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "55P03" { // lock_not_available
		return true
	}
	require.NoError(t, err)
	return false
}

// An enqueue locks a key's row only to mark it used, at most once an hour,
// and a prune leaves a key alone while an enqueue that uses it is open,
// and after it commits.
func TestFlowKeyPruneLeavesAKeyAnOpenEnqueueUses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 2}
	k := keyWithoutTasks(t, b, conc, "a")

	// An enqueue of a key marked within the hour takes no lock on it.
	enqueueOpen := func() (commit func()) {
		t.Helper()
		entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			done <- b.st.InTx(ctx, func(tx *store.Store) error {
				_, err := tx.RunInsertMany(ctx, []store.RunInsertParams{keyedTask("w", "default", `{"t": "a"}`, conc, nil)})
				close(entered)
				<-release
				return err
			})
		}()
		select {
		case <-entered:
		case err := <-done:
			t.Fatalf("the enqueue ended early: %v", err)
		}
		return func() {
			close(release)
			require.NoError(t, <-done)
		}
	}
	commit := enqueueOpen()
	require.False(t, keyRowLocked(t, b, k), "a key marked within the hour is not locked by an enqueue")
	commit()

	// An idle key: the enqueue marks it, and holds the lock until commit.
	sqlf(t, b, `DELETE FROM %s.run_rows`)
	ageFlowKeys(t, b, k)
	commit = enqueueOpen()
	require.True(t, keyRowLocked(t, b, k), "the enqueue marks an idle key's row")
	pruneCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	n, err := b.st.FlowKeyPrune(pruneCtx, 2*time.Hour, 100)
	cancel()
	require.NoError(t, err, "the prune skips the locked row rather than wait for it")
	require.Zero(t, n)
	commit()
	n, err = b.st.FlowKeyPrune(ctx, 2*time.Hour, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, []string{k}, flowKeys(t, b))
	var idle bool
	require.NoError(t, b.db.SQL.QueryRow(fmt.Sprintf(`SELECT updated_at < now() - interval '1 hour' FROM %s.flow_keys WHERE key = $1`, pgtest.Schema), k).Scan(&idle))
	require.False(t, idle, "the committed enqueue's mark stands")
}

// An enqueue that meets a prune's delete of its key (locked, then
// committed) inserts the key again.
func TestEnqueueInsertsAKeyAPruneDeletedUnderIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 3}
	k := keyWithoutTasks(t, b, conc, "a")
	ageFlowKeys(t, b, k)

	// The prune's delete, uncommitted.
	del, err := b.db.SQL.BeginTx(ctx, &sql.TxOptions{})
	require.NoError(t, err)
	_, err = del.Exec(fmt.Sprintf(`DELETE FROM %s.flow_keys WHERE key = $1`, pgtest.Schema), k)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := b.st.RunInsertMany(ctx, []store.RunInsertParams{keyedTask("w", "default", `{"t": "a"}`, conc, nil)})
		done <- err
	}()
	// The enqueue waits for the delete's transaction (the only session of
	// this database that can wait for a lock).
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			t.Fatalf("the enqueue did not wait: %v", err)
		default:
		}
		var waiting int
		require.NoError(t, b.db.SQL.QueryRow(`SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`).Scan(&waiting))
		return waiting > 0
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, del.Commit())
	require.NoError(t, <-done)
	require.Equal(t, []string{k}, flowKeys(t, b), "the key is back")
}

// An enqueue of a key marked within the hour does not wait for a claim in
// flight that updated the key's row (claims count on it): the key is not
// inserted again, so there is no conflict to wait out.
func TestEnqueueDoesNotWaitForAClaimOnAFreshKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 3}
	k := keyWithoutTasks(t, b, conc, "a")

	// A claim's count on the key, uncommitted.
	claim, err := b.db.SQL.Begin()
	require.NoError(t, err)
	defer func() { _ = claim.Rollback() }()
	_, err = claim.Exec(fmt.Sprintf(`UPDATE %s.flow_keys SET claims = claims + 1 WHERE key = $1`, pgtest.Schema), k)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = b.st.RunInsertMany(ctx, []store.RunInsertParams{keyedTask("w", "default", `{"t": "a"}`, conc, nil)})
	require.NoError(t, err, "the enqueue does not wait for the claim")
	require.Equal(t, []string{k}, flowKeys(t, b))
}

// Enqueues that mark the same idle keys at once lock them in key order:
// none fails on a deadlock.
func TestConcurrentEnqueuesMarkKeysWithoutDeadlock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	conc := &store.FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 2}
	var keys []string
	var runs, reversed []store.RunInsertParams
	for i := range 8 {
		v := fmt.Sprintf("k%d", i)
		keys = append(keys, store.FlowKey('c', "tenant", v))
		runs = append(runs, keyedTask("w", "default", `{"t": "`+v+`"}`, conc, nil))
	}
	for i := len(runs) - 1; i >= 0; i-- {
		reversed = append(reversed, runs[i])
	}
	_, err := b.st.RunInsertMany(ctx, runs)
	require.NoError(t, err)
	for round := range 20 {
		ageFlowKeys(t, b, keys...)
		errs := make(chan error, 2)
		for _, ps := range [][]store.RunInsertParams{runs, reversed} {
			go func() {
				_, err := b.st.RunInsertMany(ctx, ps)
				errs <- err
			}()
		}
		require.NoError(t, <-errs, "round %d", round)
		require.NoError(t, <-errs, "round %d", round)
	}
}
