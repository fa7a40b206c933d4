package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// A port nobody listens on: the connection is refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	gone, err := sql.Open("postgres", "postgres://postgres@"+addr+"/x?sslmode=disable")
	require.NoError(t, err)
	defer gone.Close()
	st, err := store.New(gone, pgtest.Schema)
	require.NoError(t, err)
	_, err = st.TaskGet(ctx, 1)
	require.Error(t, err)
	require.True(t, store.IsUnavailable(err), "refused: %v", err)
	require.True(t, store.IsUnavailable(fmt.Errorf("claim tasks: %w", err)), "wrapped")

	// A statement error of a reachable server is not an outage.
	db := pgtest.New(t)
	_, err = db.SQL.ExecContext(ctx, "SELECT no_such_column FROM "+pgtest.Schema+".tasks")
	require.Error(t, err)
	require.False(t, store.IsUnavailable(err), "statement error: %v", err)
	// A session the server terminates is (57P01 admin_shutdown).
	conn, err := db.SQL.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
	require.Error(t, err)
	require.True(t, store.IsUnavailable(err), "terminated: %v", err)

	require.False(t, store.IsUnavailable(nil))
	require.False(t, store.IsUnavailable(store.ErrNotFound))
	require.False(t, store.IsUnavailable(errors.New("boom")))
}

// A statement PostgreSQL refuses for what it writes is told apart from an
// outage and from errors worth retrying.
func TestIsRefused(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]bool{
		"22P05": true,  // untranslatable_character
		"23514": true,  // check_violation
		"P0001": true,  // raise_exception
		"54000": true,  // program_limit_exceeded
		"40001": false, // serialization_failure
		"40P01": false, // deadlock_detected
		"55P03": false, // lock_not_available
		"57014": false, // query_canceled
		"08006": false, // connection_failure
		"XX000": false, // internal_error
	} {
		require.Equal(t, want, store.IsRefused(fmt.Errorf("write: %w", &pq.Error{Code: pq.ErrorCode(code)})), code)
	}
	require.True(t, store.IsRefused(fmt.Errorf("x: %w", store.ErrInvalidValue)))
	require.False(t, store.IsRefused(errors.New("database down")))
	require.False(t, store.IsRefused(nil))
}
