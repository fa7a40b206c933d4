package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store/pgtest"
)

// A prepared statement whose execution is slow is retired, so that its
// next use is planned afresh: on its own and inside a transaction (where
// it runs as the transaction's copy of the cached statement).
func TestSlowStatementIsRetiredAlsoInATransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	st, err := New(db.SQL, pgtest.Schema)
	require.NoError(t, err)
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
