// Package pgtest gives each test its own migrated PostgreSQL database,
// cloned from a template, so tests run in parallel against a real server.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and in a test:
//
//	db := pgtest.New(t) // *pgtest.DB with SQL (*sql.DB) and URL
//
// With DATABASE_URL set the databases are made on that server (its user
// needs CREATEDB); otherwise a private cluster is started for the test
// binary and removed afterwards.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/lib/pq" // database/sql driver "postgres"

	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store/pgcluster"
)

// Schema is the schema the template database is migrated into.
const Schema = migrations.DefaultSchema

var (
	serverURL string // URL of the server's maintenance database
	template  string
	counter   atomic.Int64
	cluster   *pgcluster.Cluster
)

// Main starts (or connects to) the server, builds the template database,
// runs the tests, cleans up and exits.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run is Main without the exit: it returns the exit code, for a TestMain
// that checks more once the tests have run.
func Run(m *testing.M) int {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	return code
}

func run(m *testing.M) (int, error) {
	ctx := context.Background()
	if u := os.Getenv("DATABASE_URL"); u != "" {
		serverURL = u
	} else {
		dir, err := os.MkdirTemp("", "cairn-pgtest-")
		if err != nil {
			return 0, err
		}
		c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir, Fast: true,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			os.RemoveAll(dir)
			return 0, err
		}
		cluster = c
		defer c.Remove() //nolint:errcheck
		serverURL = c.URL("postgres")
	}
	template = fmt.Sprintf("cairn_tpl_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if err := createTemplate(ctx); err != nil {
		return 0, err
	}
	defer dropDatabase(template) //nolint:errcheck
	return m.Run(), nil
}

// ServerURL returns the URL of the test server's maintenance database.
func ServerURL() string { return serverURL }

func createTemplate(ctx context.Context) error {
	admin, err := sql.Open("postgres", serverURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+template); err != nil {
		return fmt.Errorf("create template database: %w", err)
	}
	tdb, err := sql.Open("postgres", WithDatabase(serverURL, template))
	if err != nil {
		return err
	}
	defer tdb.Close()
	r, err := migrations.NewRunner(tdb, Schema)
	if err != nil {
		return err
	}
	if _, err := r.Up(ctx, 0); err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	return nil
}

func dropDatabase(name string) error {
	admin, err := sql.Open("postgres", serverURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	_, err = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
	return err
}

// WithDatabase returns dsn (URL or key=value form) pointed at database name.
func WithDatabase(dsn, name string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err == nil {
			u.Path = "/" + name
			return u.String()
		}
	}
	return dsn + " dbname=" + name
}

// DB is one test's database.
type DB struct {
	SQL  *sql.DB // pool on the database; closed at cleanup
	URL  string  // connection URL of the database
	Name string  // database name
}

// New creates a fresh migrated database for t (schema "cairn") and drops it
// when t ends.
func New(t testing.TB) *DB {
	t.Helper()
	db, err := create(false)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		db.SQL.Close()
		if err := dropDatabase(db.Name); err != nil {
			t.Logf("pgtest: drop %s: %v", db.Name, err)
		}
	})
	return db
}

// NewEmpty creates a fresh database with no Cairn schema in it.
func NewEmpty(t testing.TB) *DB {
	t.Helper()
	db, err := create(true)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		db.SQL.Close()
		_ = dropDatabase(db.Name)
	})
	return db
}

func create(empty bool) (*DB, error) {
	if serverURL == "" {
		return nil, fmt.Errorf("pgtest.Main was not called from TestMain")
	}
	name := fmt.Sprintf("%s_t%d", template, counter.Add(1))
	stmt := "CREATE DATABASE " + name + " TEMPLATE " + template
	if empty {
		stmt = "CREATE DATABASE " + name
	}
	admin, err := sql.Open("postgres", serverURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	// CREATE DATABASE fails while another session touches the template;
	// none should, but retry briefly to ride out autovacuum.
	for i := 0; ; i++ {
		_, err = admin.Exec(stmt)
		if err == nil || i == 20 || !strings.Contains(err.Error(), "being accessed") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	u := WithDatabase(serverURL, name)
	pool, err := sql.Open("postgres", u)
	if err != nil {
		return nil, err
	}
	pool.SetMaxIdleConns(32) // as store.ConfigurePool: an engine runs many database users at once
	return &DB{SQL: pool, URL: u, Name: name}, nil
}
