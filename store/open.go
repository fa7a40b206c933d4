package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	_ "github.com/lib/pq" // database/sql driver "postgres"
)

// Open opens a lib/pq pool on dsn (a URL or key=value DSN) and checks the
// server answers within timeout. lib/pq does not watch the context during
// its start-up handshake, so a server that accepts the connection and never
// answers would block PingContext; the ping runs aside and is abandoned on
// timeout.
func Open(ctx context.Context, dsn string, timeout time.Duration) (*sql.DB, error) {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	ConfigurePool(db)
	if err := ping(ctx, db, timeout); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// PoolIdle is how many idle connections ConfigurePool keeps. An engine
// runs a dozen or more database users at once (two claim loops per
// queue, two completion writers, the park and resume writers, the
// heartbeat, the rescuer, the site); database/sql keeps only 2 idle by
// default, so under load it would close a connection after nearly every
// use and open another: a new PostgreSQL process each time, whose
// prepared statements are planned afresh.
const PoolIdle = 32

// ConfigurePool sets db's pool for an engine: PoolIdle idle connections,
// each closed after 5 idle minutes. Open calls it; call it on a pool of
// your own that an engine uses (or set the pool to keep as many idle).
func ConfigurePool(db *sql.DB) {
	db.SetMaxIdleConns(PoolIdle)
	db.SetConnMaxIdleTime(5 * time.Minute)
}

func ping(ctx context.Context, db *sql.DB, timeout time.Duration) error {
	pingCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- db.PingContext(pingCtx) }()
	select {
	case err := <-errc:
		if err != nil && ctx.Err() == nil && errors.Is(pingCtx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("no answer within %s", timeout)
		}
		return err
	case <-pingCtx.Done():
		if err := ctx.Err(); err != nil {
			return err
		}
		return fmt.Errorf("no answer within %s", timeout)
	}
}
