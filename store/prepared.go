package store

import (
	"container/list"
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/lib/pq"
	"github.com/uptrace/bun"
)

// The hot statements (claim, transition, run insert) are large CTEs whose
// planning costs about as much as their execution on small batches (1-3
// ms each). They run as prepared statements: parsed and planned once per
// connection, then executed with $n parameters in one round trip. Their
// SQL is written so that the generic plan is the good one: row counts come
// from jsonb_to_recordset (estimated the same with or without values) or
// from a literal LIMIT (the claim is prepared per power-of-two batch
// size), never from a parameter.

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
}{m: map[stmtKey]*list.Element{}}

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
		_ = stmt.Close()
		stmtCache.lru.MoveToFront(el)
		return el.Value.(*stmtEntry).stmt, nil
	}
	stmtCache.m[key] = stmtCache.lru.PushFront(&stmtEntry{key: key, stmt: stmt})
	for stmtCache.lru.Len() > stmtCacheMax {
		old := stmtCache.lru.Back()
		e := stmtCache.lru.Remove(old).(*stmtEntry)
		delete(stmtCache.m, e.key)
		_ = e.stmt.Close()
	}
	return stmt, nil
}

// forgetStmt drops a statement that failed, so the next use prepares it
// afresh (after a migration changed a table, or the pool was closed).
func forgetStmt(db *sql.DB, query string) {
	key := stmtKey{db, query}
	stmtCache.mu.Lock()
	defer stmtCache.mu.Unlock()
	if el, ok := stmtCache.m[key]; ok {
		e := stmtCache.lru.Remove(el).(*stmtEntry)
		delete(stmtCache.m, key)
		_ = e.stmt.Close()
	}
}

// scanPrepared runs query (see positional) as a prepared statement on the
// store's executor and scans the rows into dest as bun does.
func (s *Store) scanPrepared(ctx context.Context, dest any, query string, args ...any) error {
	db := s.db.DB
	stmt, err := preparedStmt(ctx, db, query)
	if err != nil {
		return err
	}
	switch c := s.conn.(type) {
	case bun.Tx:
		stmt = c.Tx.StmtContext(ctx, stmt)
	case *bun.Tx:
		stmt = c.Tx.StmtContext(ctx, stmt)
	case *sql.Tx:
		stmt = c.StmtContext(ctx, stmt)
	case *bun.DB:
	default:
		return errors.New("prepared statement on an unknown executor")
	}
	rows, err := stmt.QueryContext(ctx, args...)
	if err != nil {
		if ctx.Err() == nil {
			forgetStmt(db, query)
		}
		return err
	}
	return s.db.ScanRows(ctx, rows, dest)
}

// positional rewrites a query written for bun (?schema for the schema,
// ? for each argument) into PostgreSQL's $1, $2... form for schema.
// String literals and -- comments are copied as they are.
func positional(query, schema string) string {
	var b strings.Builder
	b.Grow(len(query) + 64)
	n := 0
	quoted := false
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case c == '-' && !quoted && strings.HasPrefix(query[i:], "--"):
			end := strings.IndexByte(query[i:], '\n')
			if end < 0 {
				end = len(query) - i
			}
			b.WriteString(query[i : i+end])
			i += end - 1
		case c == '\'':
			quoted = !quoted
			b.WriteByte(c)
		case c == '?' && !quoted:
			if strings.HasPrefix(query[i:], "?schema") {
				b.WriteString(`"` + schema + `"`)
				i += len("?schema") - 1
				continue
			}
			n++
			b.WriteString("$" + strconv.Itoa(n))
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// pgArray wraps a slice as a driver value for a prepared statement.
func pgArray(v any) any { return pq.Array(v) }
