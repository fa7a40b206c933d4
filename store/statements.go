package store

import (
	"embed"
	"fmt"
	"io/fs"
	"strings"
	"sync"
)

// The statements the store prepares (claims, transitions, the run
// insert) are kept whole in sql/*.sql, one file per operation, each
// statement under a "-- name: Name" line, as PostgreSQL receives it but
// for the schema (?schema) and bun's ? placeholders (see positional).
// Variants are separate statements: the claims one per literal LIMIT
// (see limitBucket), the transitions one per kind of compare-and-set.
// Those files are rendered by sqlgen_test.go (go test ./store -run
// TestSQLFiles -update) and checked by it; the others (those without its
// header, such as sql/worker_heartbeat.sql) are written by hand. Smaller
// statements are whole Go constants next to their method.
//
//go:embed sql/*.sql
var sqlFiles embed.FS

// statements are the statements of sql/*.sql by name.
var statements = mustLoadStatements(sqlFiles)

// nameMark starts the line naming the statement that follows it.
const nameMark = "-- name: "

func mustLoadStatements(fsys fs.FS) map[string]string {
	out := map[string]string{}
	files, err := fs.Glob(fsys, "sql/*.sql")
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("no sql/*.sql")
	}
	for _, f := range files {
		if err != nil {
			break
		}
		var b []byte
		if b, err = fs.ReadFile(fsys, f); err == nil {
			err = parseStatements(f, string(b), out)
		}
	}
	if err != nil {
		panic("store: load statements: " + err.Error())
	}
	return out
}

// parseStatements adds the statements of file, whose text is text, to
// into. A statement is the text after its name's line, up to the blank
// line before the next name's line (or the end of the file); what comes
// before the first name is the file's comment.
func parseStatements(file, text string, into map[string]string) error {
	pos := 0
	if !strings.HasPrefix(text, nameMark) {
		i := strings.Index(text, "\n"+nameMark)
		if i < 0 {
			return fmt.Errorf("%s: no statement", file)
		}
		pos = i + 1
	}
	for pos < len(text) {
		eol := strings.IndexByte(text[pos:], '\n')
		if eol < 0 {
			return fmt.Errorf("%s: %q names no statement", file, text[pos:])
		}
		name := strings.TrimSpace(text[pos+len(nameMark) : pos+eol])
		body := text[pos+eol+1:]
		stmt := body
		if next := strings.Index(body, "\n"+nameMark); next >= 0 {
			stmt = body[:next+1]
		}
		pos += eol + 1 + len(stmt)
		stmt, ok := strings.CutSuffix(stmt, "\n\n")
		if !ok {
			return fmt.Errorf("%s: statement %s does not end with a blank line", file, name)
		}
		if name == "" {
			return fmt.Errorf("%s: a statement without a name", file)
		}
		if _, dup := into[name]; dup {
			return fmt.Errorf("%s: statement %s named twice", file, name)
		}
		into[name] = stmt
	}
	return nil
}

// statement returns the statement name of sql/*.sql as written there
// (?schema and ? placeholders), for the raw queries of bun (see raw).
func statement(name string) string {
	text, ok := statements[name]
	if !ok {
		panic("store: no statement " + name + " in sql/*.sql")
	}
	return text
}

// query returns the statement name of sql/*.sql for the store's schema,
// with PostgreSQL's $n placeholders (see positional), rendered once.
func (s *Store) query(name string) string {
	key := s.schema + "/" + name
	if q, ok := queries.Load(key); ok {
		return q.(string)
	}
	q := positional(statement(name), s.schema)
	queries.Store(key, q)
	return q
}

// queries caches the rendered text of the prepared statements by schema
// and variant.
var queries sync.Map
