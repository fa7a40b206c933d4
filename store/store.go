// Package store holds every SQL query of Cairn, its bun row models, its
// transactions and its LISTEN/NOTIFY plumbing. The engine and the web
// server call it; it calls nothing of theirs.
//
// A Store works on an executor that is either the pool or a transaction:
// WithTx binds a caller's *sql.Tx, and operations that span several
// statements run in a transaction of their own unless already inside one.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"sync"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// ErrNotFound is returned when a row asked for does not exist.
var ErrNotFound = errors.New("not found")

// ErrNotMigrated is returned when the schema lacks Cairn's tables.
var ErrNotMigrated = errors.New("schema not migrated: run `migrate up` (or start the server without --no-migrate)")

// ErrBadSchema is returned for a schema name that is not a plain identifier.
var ErrBadSchema = errors.New("invalid schema name")

var schemaRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Store runs Cairn's queries against one schema.
type Store struct {
	db     *bun.DB
	conn   bun.IConn // pool or transaction
	inTx   bool
	schema string
	noWake bool // run inserts do not announce their ready queues (see WithoutWake)
	// queues are the queue names known to have their row (see
	// QueueEnsure), shared by the store's copies.
	queues *sync.Map
}

// New returns a store over sqldb (a lib/pq pool) for schema.
func New(sqldb *sql.DB, schema string) (*Store, error) {
	if !schemaRe.MatchString(schema) {
		return nil, fmt.Errorf("%w %q: use lower-case letters, digits and _", ErrBadSchema, schema)
	}
	db := bun.NewDB(sqldb, pgdialect.New()).WithNamedArg("schema", bun.Ident(schema))
	return &Store{db: db, conn: db, schema: schema, queues: new(sync.Map)}, nil
}

// Schema returns the Postgres schema the store works in.
func (s *Store) Schema() string { return s.schema }

// EventsChannel is the NOTIFY channel that carries committed transitions.
func (s *Store) EventsChannel() string { return s.schema + "_events" }

// ReadyChannel is the NOTIFY channel that names queues with new ready work.
func (s *Store) ReadyChannel() string { return s.schema + "_ready" }

// ControlChannel is the NOTIFY channel for cancels, signals and queue
// changes addressed to engines.
func (s *Store) ControlChannel() string { return s.schema + "_control" }

// WithTx returns a store whose queries run in tx, the caller's transaction.
func (s *Store) WithTx(tx *sql.Tx) *Store {
	return s.bound(tx)
}

// bound returns a copy of the store, with all it carries, whose queries
// run in tx.
func (s *Store) bound(tx bun.IConn) *Store {
	c := *s
	c.conn, c.inTx = tx, true
	return &c
}

// InTx runs fn in a transaction: the store's own when it is already bound
// to one, otherwise a new one committed when fn returns nil.
func (s *Store) InTx(ctx context.Context, fn func(tx *Store) error) error {
	return s.inTxWith(ctx, nil, fn)
}

// inTxWith is InTx with the options of a new transaction.
func (s *Store) inTxWith(ctx context.Context, opts *sql.TxOptions, fn func(tx *Store) error) error {
	if s.inTx {
		return fn(s)
	}
	tx, err := s.db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(s.bound(tx)); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// withoutJIT runs fn in a transaction (the store's, when bound to one;
// else a new one, read-only when fn only reads, so that it runs on a
// replica too) with JIT compilation off, for statements the planner
// prices far above what they cost: compiling them would take longer than
// running them.
func (s *Store) withoutJIT(ctx context.Context, readOnly bool, fn func(tx *Store) error) error {
	return s.inTxWith(ctx, &sql.TxOptions{ReadOnly: readOnly}, func(tx *Store) error {
		if _, err := tx.exec(ctx, `SET LOCAL jit = off`); err != nil {
			return err
		}
		return fn(tx)
	})
}

// scanWithoutJIT reads query into dest in a read-only transaction with
// JIT compilation off (see withoutJIT).
func (s *Store) scanWithoutJIT(ctx context.Context, dest any, query string, args ...any) error {
	return s.withoutJIT(ctx, true, func(tx *Store) error {
		return tx.raw(query, args...).Scan(ctx, dest)
	})
}

// Snapshot runs fn in a read-only REPEATABLE READ transaction, so that
// every read of fn sees one snapshot: a page assembled from several
// queries never shows a task's attempts from after a commit and its output
// from before it. Inside a transaction it runs fn in that one.
func (s *Store) Snapshot(ctx context.Context, fn func(tx *Store) error) error {
	if s.inTx {
		return fn(s)
	}
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	return fn(s.bound(tx))
}

// raw builds a raw query on the store's executor. Query text uses ?schema
// for the schema identifier and ? for arguments. bun writes the arguments
// into the query text, so they are checked first (checkArgs): a value
// PostgreSQL cannot take is ErrInvalidValue and no SQL is sent.
func (s *Store) raw(query string, args ...any) rawQuery {
	return rawQuery{q: s.db.NewRaw(query, args...).Conn(s.conn), err: checkArgs(args)}
}

// rawQuery is a bun raw query whose arguments were checked, and whose
// data exceptions come back as ErrInvalidValue.
type rawQuery struct {
	q   *bun.RawQuery
	err error
}

// Scan runs the query and scans its rows into dest.
func (q rawQuery) Scan(ctx context.Context, dest ...any) error {
	if q.err != nil {
		return q.err
	}
	return invalidValue(q.q.Scan(ctx, dest...))
}

// Exec runs the query.
func (q rawQuery) Exec(ctx context.Context, dest ...any) (sql.Result, error) {
	if q.err != nil {
		return nil, q.err
	}
	res, err := q.q.Exec(ctx, dest...)
	return res, invalidValue(err)
}

// exec runs a statement that returns no rows.
func (s *Store) exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return s.raw(query, args...).Exec(ctx)
}

// CheckMigrated returns ErrNotMigrated unless the schema has Cairn's tables.
func (s *Store) CheckMigrated(ctx context.Context) error {
	var n int
	err := s.raw(`SELECT count(*) FROM pg_tables WHERE schemaname = ? AND tablename IN ('run_rows', 'tasks', 'task_events', 'workers', 'queues', 'schedules', 'leases')`, s.schema).Scan(ctx, &n)
	if err != nil {
		return fmt.Errorf("check schema %s: %w", s.schema, err)
	}
	if n < 7 {
		return fmt.Errorf("%w (schema %q)", ErrNotMigrated, s.schema)
	}
	return nil
}

func notFound(err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return ErrNotFound
	}
	return err
}

// array wraps a slice for use as a Postgres array argument.
func array(v any) any { return arrayArg{v} }
