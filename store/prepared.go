package store

import (
	"container/list"
	"context"
	"database/sql"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lib/pq"
	"github.com/uptrace/bun"

	"github.com/cairnhq/cairn/store/sqltext"
)

// The hot statements (claim, transition, run insert) are large CTEs whose
// planning costs about as much as their execution on small batches (1-3
// ms each). They run as prepared statements: parsed and planned once per
// connection, then executed with $n parameters in one round trip. Their
// SQL is written so that the generic plan is the good one: row counts come
// from jsonb_to_recordset (estimated the same with or without values) or
// from a literal LIMIT (the unkeyed claims are prepared per power-of-two
// batch size; the keyed claims, whose updates reach their rows by tuple
// id whatever the estimate, are one statement each), never from a
// parameter.

// stmtCacheMax bounds the prepared statements kept across pools: a
// process normally has one pool and a dozen statements, tests open many
// pools; the least recently used statement is closed beyond the bound.
const stmtCacheMax = 256

type stmtKey struct {
	db    *sql.DB
	query string
}

type stmtEntry struct {
	key  stmtKey
	stmt *sql.Stmt
}

var stmtCache = struct {
	mu  sync.Mutex
	m   map[stmtKey]*list.Element
	lru list.List
	// slow is when each statement was last retired for a slow execution,
	// and how long it stays before it may be again (see retireSlow).
	slow map[stmtKey]slowRetired
}{m: map[stmtKey]*list.Element{}, slow: map[stmtKey]slowRetired{}}

// slowRetired is a statement's last retirement for slowness.
type slowRetired struct {
	at   time.Time
	wait time.Duration
}

// preparedStmt returns the pool's prepared statement for query, preparing
// it on first use.
func preparedStmt(ctx context.Context, db *sql.DB, query string) (*sql.Stmt, error) {
	key := stmtKey{db, query}
	stmtCache.mu.Lock()
	if el, ok := stmtCache.m[key]; ok {
		stmtCache.lru.MoveToFront(el)
		stmtCache.mu.Unlock()
		return el.Value.(*stmtEntry).stmt, nil
	}
	stmtCache.mu.Unlock()
	stmt, err := db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	stmtCache.mu.Lock()
	defer stmtCache.mu.Unlock()
	if el, ok := stmtCache.m[key]; ok { // prepared meanwhile by another goroutine
		closeLater(stmt, 0)
		stmtCache.lru.MoveToFront(el)
		return el.Value.(*stmtEntry).stmt, nil
	}
	stmtCache.m[key] = stmtCache.lru.PushFront(&stmtEntry{key: key, stmt: stmt})
	for stmtCache.lru.Len() > stmtCacheMax {
		old := stmtCache.lru.Back()
		e := stmtCache.lru.Remove(old).(*stmtEntry)
		delete(stmtCache.m, e.key)
		closeLater(e.stmt, retiredClose)
	}
	return stmt, nil
}

// txPrepareWait bounds the wait of a transaction for a connection of
// the pool to prepare a statement on (see poolStmt).
const txPrepareWait = 50 * time.Millisecond

// poolStmt returns the pool's prepared statement for query (see
// preparedStmt). Preparing on the pool takes a connection of its own:
// inside a transaction (tx not nil), while every connection of the pool
// is in a transaction waiting to prepare (handlers journaling steps at
// once), none would come free. So a transaction waits txPrepareWait at
// most, then gets nil (the query runs unprepared on its own connection)
// and the statement is prepared in the background for the next time.
func (s *Store) poolStmt(ctx context.Context, db *sql.DB, tx *sql.Tx, query string) (*sql.Stmt, error) {
	if tx == nil {
		return preparedStmt(ctx, db, query)
	}
	wctx, cancel := context.WithTimeout(ctx, txPrepareWait)
	defer cancel()
	stmt, err := preparedStmt(wctx, db, query)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		warmStmt(db, query)
		return nil, nil
	}
	return stmt, err
}

// warming holds the statements warmStmt is preparing.
var warming sync.Map // of stmtKey

// warmStmt prepares the pool's statement for query in the background
// (once at a time per statement), when a connection comes free.
func warmStmt(db *sql.DB, query string) {
	key := stmtKey{db, query}
	if _, busy := warming.LoadOrStore(key, true); busy {
		return
	}
	go func() {
		defer warming.Delete(key)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = preparedStmt(ctx, db, query)
	}()
}

// closeLater closes stmt after delay, on another goroutine. Closing waits
// for every connection the statement was prepared on to be free, and one
// of them may be running a query that waits on a row lock held by the
// caller's own transaction: closing in line (worse, under stmtCache.mu,
// which that transaction's next statement needs) deadlocked the engine.
func closeLater(stmt *sql.Stmt, delay time.Duration) {
	time.AfterFunc(delay, func() { _ = stmt.Close() })
}

// retireStmt drops the cached statement for query (when it is stmt, or
// whatever it is when stmt is nil), so the next use prepares it afresh
// (after a failure, a slow plan, or a migration that changed a table), and
// closes it after retiredClose.
func retireStmt(db *sql.DB, query string, stmt *sql.Stmt) {
	key := stmtKey{db, query}
	stmtCache.mu.Lock()
	defer stmtCache.mu.Unlock()
	el, ok := stmtCache.m[key]
	if !ok {
		return
	}
	e := el.Value.(*stmtEntry)
	if stmt != nil && e.stmt != stmt {
		return // already replaced
	}
	stmtCache.lru.Remove(el)
	delete(stmtCache.m, key)
	closeLater(e.stmt, retiredClose)
}

// A generic plan is made once per connection, with the table sizes and
// statistics of that moment: one made while tables were nearly empty (a
// fresh database, before autovacuum analyzes) can scan whole tables once
// they are large, until PostgreSQL invalidates it. An execution slower than
// slowStmtBase plus slowStmtPerRow per row retires the statement, so the
// next one is planned afresh; the old one is closed a minute later, once
// executions in flight on it are done.
//
// A statement that is slow whatever its plan (a keyed claim while a held
// snapshot keeps dead index entries, a large batch on a loaded machine)
// would be planned afresh on every connection again and again: measured,
// a keyed claim spent 5 ms of its 27 in planning. So a statement retired
// for slowness stays for slowRetireEvery at least, and when it is slow
// again soon after (within twice its wait: the fresh plan did not help),
// for four times as long as the last time, up to slowRetireMax. Under a held
// snapshot every statement is slower for minutes, and each retirement
// costs every connection a fresh preparation: five custom plans of 2-5
// ms before PostgreSQL settles on the generic one. The first wait is not
// longer: a plan made again while the tables are still small (a fresh
// database, before autovacuum analyzes them) can be as bad as the first,
// and with a minute it stayed for one (keyed claims' p99 1.1-1.4 s in the
// first minute of two bloat runs, against 70-180 ms).
const (
	slowStmtBase    = 50 * time.Millisecond
	slowStmtPerRow  = time.Millisecond
	retiredClose    = time.Minute
	slowRetireEvery = 5 * time.Second
	slowRetireMax   = 5 * time.Minute
)

// retireSlow retires stmt, the cached statement for query, after an
// execution that was slow (see slowStmtBase), unless the statement was
// retired for slowness less than its wait ago. It reports whether it did.
func retireSlow(db *sql.DB, query string, stmt *sql.Stmt, now time.Time) bool {
	key := stmtKey{db, query}
	stmtCache.mu.Lock()
	last, ok := stmtCache.slow[key]
	if ok && now.Sub(last.at) < last.wait {
		stmtCache.mu.Unlock()
		return false
	}
	next := slowRetired{at: now, wait: slowRetireEvery}
	if ok && now.Sub(last.at) < 2*last.wait {
		next.wait = min(4*last.wait, slowRetireMax)
	}
	if len(stmtCache.slow) >= stmtCacheMax {
		for k, r := range stmtCache.slow {
			if now.Sub(r.at) >= 2*r.wait { // its next wait would start over
				delete(stmtCache.slow, k)
			}
		}
	}
	if len(stmtCache.slow) < stmtCacheMax {
		stmtCache.slow[key] = next
	}
	stmtCache.mu.Unlock()
	retireStmt(db, query, stmt)
	return true
}

// scanPrepared runs query (see positional) as a prepared statement on the
// store's executor and scans the rows into dest: a pointer to a slice, as
// bun does, or a rowScanner. Its arguments are checked first
// (checkArgs), and data exceptions come back as ErrInvalidValue.
func (s *Store) scanPrepared(ctx context.Context, dest any, query string, args ...any) error {
	if err := checkArgs(args); err != nil {
		return err
	}
	return invalidValue(s.runPrepared(ctx, dest, query, args...))
}

func (s *Store) runPrepared(ctx context.Context, dest any, query string, args ...any) error {
	db := s.db.DB
	var tx *sql.Tx
	switch c := s.conn.(type) {
	case bun.Tx:
		tx = c.Tx
	case *bun.Tx:
		tx = c.Tx
	case *sql.Tx:
		tx = c
	case *bun.DB:
	default:
		return errors.New("prepared statement on an unknown executor")
	}
	stmt, err := s.poolStmt(ctx, db, tx, query)
	if err != nil {
		return err
	}
	if stmt == nil {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		if rs, ok := dest.(rowScanner); ok {
			defer rows.Close()
			return rs.scanRows(rows)
		}
		return s.db.ScanRows(ctx, rows, dest)
	}
	start := time.Now()
	cached := stmt // stmt becomes the transaction's copy below: retire this one
	defer func() {
		if took := time.Since(start); took > slowStmtBase {
			if rows := destLen(dest); took > slowStmtBase+time.Duration(rows)*slowStmtPerRow {
				retireSlow(db, query, cached, time.Now())
			}
		}
	}()
	if tx != nil {
		stmt = tx.StmtContext(ctx, stmt)
	}
	rows, err := stmt.QueryContext(ctx, args...)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(invalidValue(err), ErrInvalidValue) { // a bad value is no reason to plan again
			retireStmt(db, query, nil)
		}
		return err
	}
	if rs, ok := dest.(rowScanner); ok {
		defer rows.Close()
		return rs.scanRows(rows)
	}
	return s.db.ScanRows(ctx, rows, dest)
}

// destLen is how many rows dest (of runPrepared) holds.
func destLen(dest any) int {
	if rs, ok := dest.(rowScanner); ok {
		return rs.rowCount()
	}
	return reflect.ValueOf(dest).Elem().Len()
}

// positional rewrites a query written for bun (?schema for the schema,
// ? for each argument) into PostgreSQL's $1, $2... form for schema.
// String literals and -- comments are copied as they are.
func positional(query, schema string) string {
	n := 0
	out, _ := sqltext.Rewrite(query, true, '?', func(rest string) (string, int, error) {
		if strings.HasPrefix(rest, "?schema") {
			return `"` + schema + `"`, len("?schema"), nil
		}
		n++
		return "$" + strconv.Itoa(n), 1, nil
	})
	return out
}

// pgArray wraps a slice as a driver value for a prepared statement.
func pgArray(v any) any { return pq.Array(v) }
