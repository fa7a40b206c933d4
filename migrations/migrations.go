// Package migrations holds Cairn's numbered SQL migrations, embedded in the
// binary, and the runner that applies them to one Postgres schema.
//
// Each migration is a pair NNN_name.up.sql / NNN_name.down.sql. The runner
// records applied versions in <schema>.schema_migrations, applies each
// migration in its own transaction (so a failure leaves the schema as it
// was) and holds an advisory lock so that concurrent runners take turns.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

//go:embed *.sql
var files embed.FS

// DefaultSchema is the Postgres schema Cairn lives in unless told otherwise.
const DefaultSchema = "cairn"

// Migration is one numbered step.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

// Status is one migration and whether it is applied.
type Status struct {
	Migration
	Applied   bool
	AppliedAt time.Time
}

// ErrBadSchema is returned for a schema name that is not a plain identifier.
var ErrBadSchema = errors.New("invalid schema name")

var (
	schemaRe = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)
	fileRe   = regexp.MustCompile(`^(\d+)_([a-z0-9_]+)\.(up|down)\.sql$`)
)

// ValidateSchema reports whether name is usable as a schema name: lower-case
// letters, digits and underscores, not starting with a digit.
func ValidateSchema(name string) error {
	if !schemaRe.MatchString(name) {
		return fmt.Errorf("%w %q: use lower-case letters, digits and _", ErrBadSchema, name)
	}
	return nil
}

// All returns the embedded migrations in version order.
func All() ([]Migration, error) { return load(files) }

func load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := fileRe.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		v, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", e.Name(), err)
		}
		mig := byVersion[v]
		if mig == nil {
			mig = &Migration{Version: v, Name: m[2]}
			byVersion[v] = mig
		}
		if mig.Name != m[2] {
			return nil, fmt.Errorf("migration %d has two names: %s and %s", v, mig.Name, m[2])
		}
		if m[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migration %03d_%s needs both .up.sql and .down.sql", m.Version, m.Name)
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// Runner applies migrations to one schema.
type Runner struct {
	db         *sql.DB
	schema     string
	migrations []Migration
	// Progress, when set, is told about each migration as it is applied.
	Progress func(direction string, m Migration, took time.Duration)
}

// NewRunner returns a runner for schema over the embedded migrations.
func NewRunner(db *sql.DB, schema string) (*Runner, error) {
	if err := ValidateSchema(schema); err != nil {
		return nil, err
	}
	all, err := All()
	if err != nil {
		return nil, err
	}
	return &Runner{db: db, schema: schema, migrations: all}, nil
}

func (r *Runner) table() string { return r.schema + ".schema_migrations" }

// lockKey derives the advisory lock key from the schema name, so runners of
// different schemas do not wait for each other.
func (r *Runner) lockKey() int64 {
	h := fnv.New64a()
	h.Write([]byte("cairn-migrate:" + r.schema))
	return int64(h.Sum64() >> 1)
}

// withLock runs fn on one connection holding the schema's advisory lock.
func (r *Runner) withLock(ctx context.Context, fn func(conn *sql.Conn) error) error {
	conn, err := r.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", r.lockKey()); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", r.lockKey()) //nolint:errcheck
	return fn(conn)
}

func (r *Runner) applied(ctx context.Context, conn *sql.Conn) (map[int]time.Time, error) {
	var exists bool
	err := conn.QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'schema_migrations')`,
		r.schema).Scan(&exists)
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	out := map[int]time.Time{}
	if !exists {
		return out, nil
	}
	rows, err := conn.QueryContext(ctx, "SELECT version, applied_at FROM "+r.table())
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		var at time.Time
		if err := rows.Scan(&v, &at); err != nil {
			return nil, err
		}
		out[v] = at
	}
	return out, rows.Err()
}

// Status lists every known migration and whether it is applied.
func (r *Runner) Status(ctx context.Context) ([]Status, error) {
	var out []Status
	err := r.withLock(ctx, func(conn *sql.Conn) error {
		applied, err := r.applied(ctx, conn)
		if err != nil {
			return err
		}
		for _, m := range r.migrations {
			at, ok := applied[m.Version]
			out = append(out, Status{Migration: m, Applied: ok, AppliedAt: at})
		}
		return nil
	})
	return out, err
}

// Pending reports how many migrations are not applied yet.
func (r *Runner) Pending(ctx context.Context) (int, error) {
	st, err := r.Status(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range st {
		if !s.Applied {
			n++
		}
	}
	return n, nil
}

// Up applies up to n pending migrations in order (n <= 0: all) and returns
// the ones it applied.
func (r *Runner) Up(ctx context.Context, n int) ([]Migration, error) {
	var done []Migration
	err := r.withLock(ctx, func(conn *sql.Conn) error {
		if _, err := conn.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+r.schema); err != nil {
			return fmt.Errorf("create schema %s: %w", r.schema, err)
		}
		if _, err := conn.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+r.table()+
			" (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"); err != nil {
			return fmt.Errorf("create %s: %w", r.table(), err)
		}
		applied, err := r.applied(ctx, conn)
		if err != nil {
			return err
		}
		for _, m := range r.migrations {
			if _, ok := applied[m.Version]; ok {
				continue
			}
			if n > 0 && len(done) == n {
				break
			}
			if err := r.apply(ctx, conn, m, "up"); err != nil {
				return err
			}
			done = append(done, m)
		}
		return nil
	})
	return done, err
}

// Down reverts the n most recent applied migrations (n <= 0: all of them,
// and then the bookkeeping table and the schema if it is left empty).
func (r *Runner) Down(ctx context.Context, n int) ([]Migration, error) {
	var done []Migration
	err := r.withLock(ctx, func(conn *sql.Conn) error {
		applied, err := r.applied(ctx, conn)
		if err != nil {
			return err
		}
		for i := len(r.migrations) - 1; i >= 0; i-- {
			m := r.migrations[i]
			if _, ok := applied[m.Version]; !ok {
				continue
			}
			if n > 0 && len(done) == n {
				break
			}
			if err := r.apply(ctx, conn, m, "down"); err != nil {
				return err
			}
			done = append(done, m)
		}
		if n <= 0 {
			return r.dropBookkeeping(ctx, conn)
		}
		return nil
	})
	return done, err
}

func (r *Runner) dropBookkeeping(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, "DROP TABLE IF EXISTS "+r.table()); err != nil {
		return fmt.Errorf("drop %s: %w", r.table(), err)
	}
	var left int
	err := conn.QueryRowContext(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1`, r.schema).Scan(&left)
	if err != nil {
		return fmt.Errorf("inspect schema %s: %w", r.schema, err)
	}
	if left == 0 {
		if _, err := conn.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+r.schema); err != nil {
			return fmt.Errorf("drop schema %s: %w", r.schema, err)
		}
	}
	return nil
}

// apply runs one migration and its bookkeeping in one transaction.
func (r *Runner) apply(ctx context.Context, conn *sql.Conn, m Migration, direction string) error {
	start := time.Now()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %03d_%s %s: begin: %w", m.Version, m.Name, direction, err)
	}
	defer tx.Rollback() //nolint:errcheck
	if _, err := tx.ExecContext(ctx, "SET LOCAL search_path TO "+r.schema); err != nil {
		return fmt.Errorf("migration %03d_%s %s: %w", m.Version, m.Name, direction, err)
	}
	body := m.Up
	if direction == "down" {
		body = m.Down
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		return fmt.Errorf("migration %03d_%s %s: %w", m.Version, m.Name, direction, err)
	}
	if direction == "up" {
		_, err = tx.ExecContext(ctx, "INSERT INTO "+r.table()+" (version, name) VALUES ($1, $2)", m.Version, m.Name)
	} else {
		_, err = tx.ExecContext(ctx, "DELETE FROM "+r.table()+" WHERE version = $1", m.Version)
	}
	if err != nil {
		return fmt.Errorf("migration %03d_%s %s: record: %w", m.Version, m.Name, direction, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %03d_%s %s: commit: %w", m.Version, m.Name, direction, err)
	}
	if r.Progress != nil {
		r.Progress(direction, m, time.Since(start))
	}
	return nil
}

// Create writes an empty pair of migration files in dir, numbered after the
// highest version found there, and returns their paths.
func Create(dir, name string) (up, down string, err error) {
	name = strings.ToLower(strings.TrimSpace(name))
	if !regexp.MustCompile(`^[a-z0-9_]+$`).MatchString(name) {
		return "", "", fmt.Errorf("invalid migration name %q: use lower-case letters, digits and _", name)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", "", fmt.Errorf("read %s: %w", dir, err)
	}
	next := 1
	for _, e := range entries {
		if m := fileRe.FindStringSubmatch(e.Name()); m != nil {
			if v, _ := strconv.Atoi(m[1]); v >= next {
				next = v + 1
			}
		}
	}
	base := filepath.Join(dir, fmt.Sprintf("%03d_%s", next, name))
	up, down = base+".up.sql", base+".down.sql"
	for _, p := range []string{up, down} {
		if err := os.WriteFile(p, []byte("-- "+filepath.Base(p)+"\n"), 0o644); err != nil {
			return "", "", fmt.Errorf("write %s: %w", p, err)
		}
	}
	return up, down, nil
}
