package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	_ "github.com/lib/pq" // database/sql driver "postgres"
)

// ErrEmptyDSN is returned by Open for an empty database URL: lib/pq would
// otherwise try its defaults (a local socket) and fail later, far from
// the cause.
var ErrEmptyDSN = errors.New("database URL is empty: set DATABASE_URL (postgres://user:password@host:5432/dbname)")

// Open opens a lib/pq pool on dsn (a URL or key=value DSN) and checks the
// server answers within timeout. An error names the URL it tried, its
// password masked (RedactDSN). lib/pq does not watch the context during
// its start-up handshake, so a server that accepts the connection and
// never answers would block PingContext; the ping runs aside and is
// abandoned on timeout.
func Open(ctx context.Context, dsn string, timeout time.Duration) (*sql.DB, error) {
	if strings.TrimSpace(dsn) == "" {
		return nil, ErrEmptyDSN
	}
	db, err := sql.Open("postgres", dsn)
	if err == nil {
		ConfigurePool(db)
		if err = ping(ctx, db, timeout); err != nil {
			db.Close()
		}
	}
	if err != nil {
		// A driver's message may quote the DSN whole.
		return nil, fmt.Errorf("%s: %w", RedactDSN(dsn), redactedError{err, dsn})
	}
	return db, nil
}

// redactedError is err with its message's copies of dsn redacted; errors.Is
// and errors.As still reach err.
type redactedError struct {
	err error
	dsn string
}

func (e redactedError) Error() string {
	return strings.ReplaceAll(e.err.Error(), e.dsn, RedactDSN(e.dsn))
}

func (e redactedError) Unwrap() error { return e.err }

var (
	passwordParam = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)`)
	urlUserinfo   = regexp.MustCompile(`^(postgres(?:ql)?://)[^@/]*@`)
)

// RedactDSN returns dsn (a URL or key=value DSN) with its password
// replaced by xxxxx, for logs and error messages.
func RedactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		dsn = u.Redacted()
	} else {
		dsn = urlUserinfo.ReplaceAllString(dsn, "${1}xxxxx@")
	}
	return passwordParam.ReplaceAllString(dsn, "${1}xxxxx")
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
