package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store/pgtest"
)

// newTestStore returns a fresh migrated database and a store on it.
func newTestStore(t *testing.T) (*pgtest.DB, *Store) {
	t.Helper()
	db := pgtest.New(t)
	st, err := New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
	return db, st
}

// A prepared statement whose execution is slow is retired, so that its
// next use is planned afresh: on its own and inside a transaction (where
// it runs as the transaction's copy of the cached statement).
func TestSlowStatementIsRetiredAlsoInATransaction(t *testing.T) {
	t.Parallel()
	_, st := newTestStore(t)
	ctx := context.Background()
	cached := func(query string) bool {
		stmtCache.mu.Lock()
		defer stmtCache.mu.Unlock()
		_, ok := stmtCache.m[stmtKey{st.db.DB, query}]
		return ok
	}
	var rows []struct {
		X string `bun:"x"`
	}
	fast := "SELECT 'fast in tx' AS x"
	slow := "SELECT pg_sleep(0.08)::text || ' in tx' AS x"
	require.NoError(t, st.InTx(ctx, func(tx *Store) error {
		if err := tx.scanPrepared(ctx, &rows, fast); err != nil {
			return err
		}
		return tx.scanPrepared(ctx, &rows, slow)
	}))
	require.False(t, cached(slow), "a slow statement in a transaction is retired")
	// A fast statement stays prepared. On a loaded machine one execution
	// of it can take longer than slowStmtBase (and be retired): it is
	// run until one does not.
	require.Eventually(t, func() bool {
		require.NoError(t, st.InTx(ctx, func(tx *Store) error { return tx.scanPrepared(ctx, &rows, fast) }))
		return cached(fast)
	}, 30*time.Second, time.Millisecond, "a fast statement stays prepared")

	slow = "SELECT pg_sleep(0.08)::text AS x"
	require.NoError(t, st.scanPrepared(ctx, &rows, slow))
	require.False(t, cached(slow), "a slow statement is retired")

	// Planned afresh and as slow: it stays, for slowRetireEvery.
	require.NoError(t, st.scanPrepared(ctx, &rows, slow))
	require.True(t, cached(slow), "a statement retired for slowness a moment ago is not retired again")
	stmt, err := preparedStmt(ctx, st.db.DB, slow)
	require.NoError(t, err)
	require.True(t, retireSlow(st.db.DB, slow, stmt, time.Now().Add(slowRetireEvery)), "retired again once slowRetireEvery has passed")
	require.False(t, cached(slow))
}

// A statement that stays slow after being planned afresh waits four times
// as long each time before it is retired again, up to slowRetireMax; once it
// has not been slow for twice its wait, the wait starts over.
func TestSlowRetirementBacksOffWhileTheStatementStaysSlow(t *testing.T) {
	t.Parallel()
	db := new(sql.DB) // a key only: nothing is cached for it
	const query = "SELECT 'backs off'"
	at := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	retired := func(after time.Duration) bool {
		return retireSlow(db, query, nil, at.Add(after))
	}
	require.True(t, retired(0))
	wait := slowRetireEvery
	for range 10 {
		require.False(t, retired(wait-time.Millisecond), "retired again before its wait (%s) ran out", wait)
		require.True(t, retired(wait), "retired once its wait (%s) ran out", wait)
		at = at.Add(wait)
		wait = min(4*wait, slowRetireMax)
	}
	require.Equal(t, slowRetireMax, wait, "the wait grew up to its bound")
	require.False(t, retired(slowRetireMax-time.Millisecond))

	// Not slow for twice the wait: the next retirement's wait starts over.
	require.True(t, retired(2*slowRetireMax))
	at = at.Add(2 * slowRetireMax)
	require.False(t, retired(slowRetireEvery-time.Millisecond))
	require.True(t, retired(slowRetireEvery))
}

// The claim statements settle on their generic plan. PostgreSQL plans a
// prepared statement afresh at every execution while its generic plan
// looks dearer than the custom ones, at 2-5 ms a plan: under a held
// snapshot (cmd/bench -scenario bloat) the claim was planned 14,444 times
// in 32,779 executions, 27 s of planning in a 2-minute run. So their
// estimates must not depend on the parameters' values: the queue arrays
// are read through subqueries, whose length the planner does not look
// into (of a literal array it counts the elements). Then the generic plan
// costs what a custom one does, and wins on the planning it saves (no
// claim sets plan_cache_mode: the keyed claims once did, at a round trip
// a claim).
func TestClaimStatementsCostTheSameWithAndWithoutTheirValues(t *testing.T) {
	t.Parallel()
	db, st := newTestStore(t)
	ctx := context.Background()
	conn, err := db.SQL.Conn(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	claimArgs := `'{default}', '{1}', '{-2147483648}', '{0}', 1, 1, 60000, 'e', 'r', 'c', false`
	keyedArgs := `'{default}', '{1}', '{-2147483648}', '{0}', '{0}', 1, '{""}', 1, 60000, 'e', 'r', 'c', false`
	for name, stmt := range map[string]struct{ query, args string }{
		"claim":                  {st.claimQuery(limitBucket(1)), claimArgs},
		"finish and claim":       {st.finishClaimQuery(limitBucket(1), false), `'[{"id": 1, "from_status": "running", "to_status": "completed"}]', 1, 1, ` + claimArgs},
		"park and claim":         {st.finishClaimQuery(limitBucket(1), true), `'[{"id": 1, "from_status": "running", "to_status": "deferred"}]', 1, 1, ` + claimArgs},
		"keyed claim":            {st.keyedClaimQuery(), keyedArgs},
		"finish and keyed claim": {st.finishKeyedClaimQuery(), `'[{"id": 1, "from_status": "running", "to_status": "completed"}]', 1, 1, ` + keyedArgs},
	} {
		_, err := conn.ExecContext(ctx, `DEALLOCATE ALL`)
		require.NoError(t, err)
		_, err = conn.ExecContext(ctx, `PREPARE s AS `+stmt.query)
		require.NoError(t, err, name)
		cost := func(mode string) float64 {
			_, err := conn.ExecContext(ctx, `SET plan_cache_mode = `+mode)
			require.NoError(t, err)
			var js []byte
			require.NoError(t, conn.QueryRowContext(ctx, `EXPLAIN (FORMAT JSON) EXECUTE s(`+stmt.args+`)`).Scan(&js), name)
			var plan []struct {
				Plan struct {
					Cost float64 `json:"Total Cost"`
				}
			}
			require.NoError(t, json.Unmarshal(js, &plan))
			return plan[0].Plan.Cost
		}
		generic, custom := cost("force_generic_plan"), cost("force_custom_plan")
		require.InEpsilon(t, custom, generic, 0.01, "%s: the generic plan's cost %.2f, a custom one's %.2f", name, generic, custom)
		// Left to choose, PostgreSQL runs the generic plan from the sixth
		// execution on (the first five are custom plans).
		_, err = conn.ExecContext(ctx, `SET plan_cache_mode = auto; DEALLOCATE s; PREPARE s AS `+stmt.query)
		require.NoError(t, err)
		for range 8 {
			_, err := conn.ExecContext(ctx, `EXECUTE s(`+stmt.args+`)`)
			require.NoError(t, err, name)
		}
		var generics, customs int
		require.NoError(t, conn.QueryRowContext(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 's'`).Scan(&generics, &customs))
		require.Equal(t, 5, customs, "%s: custom plans", name)
		require.Equal(t, 3, generics, "%s: executions on the generic plan", name)
	}
}

// Transactions that hold every connection of the pool and each run a
// statement not prepared yet do not wait for ever for a connection to
// prepare it on: each runs it on its own connection, and the statement
// is prepared for the pool once one comes free.
func TestTransactionsHoldingThePoolRunStatementsNotPreparedYet(t *testing.T) {
	t.Parallel()
	db, st := newTestStore(t)
	db.SQL.SetMaxOpenConns(2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	query := "SELECT 'held pool' AS x"
	var begun sync.WaitGroup
	begun.Add(2)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			errs <- st.InTx(ctx, func(tx *Store) error {
				var ids []int64
				if err := tx.raw(`SELECT 1`).Scan(ctx, &ids); err != nil { // the transaction holds its connection
					begun.Done()
					return err
				}
				begun.Done()
				begun.Wait() // both connections are in a transaction
				var rows []struct {
					X string `bun:"x"`
				}
				return tx.scanPrepared(ctx, &rows, query)
			})
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.Eventually(t, func() bool { return cachedStmt(st.db.DB, query) != nil }, 20*time.Second, time.Millisecond,
		"prepared for the pool once a connection is free")
}

// cachedStmt returns the pool's prepared statement for query, nil when
// it is not prepared.
func cachedStmt(db *sql.DB, query string) *sql.Stmt {
	stmtCache.mu.Lock()
	defer stmtCache.mu.Unlock()
	if el, ok := stmtCache.m[stmtKey{db, query}]; ok {
		return el.Value.(*stmtEntry).stmt
	}
	return nil
}
