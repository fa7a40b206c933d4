package main

import (
	"bytes"
	"context"
	"database/sql"
	"flag"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	readyDeadline = 2 * time.Minute // generous: may include initdb
	stopDeadline  = 30 * time.Second
)

// server is one run of the server in a goroutine.
type server struct {
	url    string             // http://host:port
	cancel context.CancelFunc // starts the shutdown
	done   chan struct{}      // closed when run returned
	err    error              // what run returned; read after done
}

// start runs the server with cfg and waits until it is ready. The server
// is stopped when the test ends.
func start(t *testing.T, cfg config) *server {
	t.Helper()
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &server{cancel: cancel, done: make(chan struct{})}
	readyc := make(chan string, 1)
	go func() {
		defer close(s.done)
		s.err = run(ctx, cfg, func(addr string) { readyc <- addr })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-s.done:
		case <-time.After(stopDeadline):
			t.Errorf("run did not return within %s of cancel", stopDeadline)
		}
	})
	select {
	case addr := <-readyc:
		s.url = "http://" + addr
	case <-s.done:
		t.Fatalf("run returned before it was ready: %v", s.err)
	case <-time.After(readyDeadline):
		t.Fatalf("server not ready within %s", readyDeadline)
	}
	return s
}

// stop cancels the server's context and returns what run returned.
func (s *server) stop(t *testing.T) error {
	t.Helper()
	s.cancel()
	select {
	case <-s.done:
		return s.err
	case <-time.After(stopDeadline):
		t.Fatalf("run did not return within %s of cancel", stopDeadline)
		return nil
	}
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func tableExists(t *testing.T, db *sql.DB, schema, table string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.QueryRow(`SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = $2)`,
		schema, table).Scan(&ok))
	return ok
}

func TestServeMigratesEmptyDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	require.False(t, tableExists(t, db.SQL, "cairn", "tasks"))

	var logs syncBuffer
	s := start(t, config{addr: "127.0.0.1:0", databaseURL: db.URL, schema: "cairn",
		logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil))})

	code, body := get(t, s.url+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", body)

	code, body = get(t, s.url+"/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Overview · Cairn")

	code, _ = get(t, s.url+"/no-such-page")
	require.Equal(t, http.StatusNotFound, code)

	require.True(t, tableExists(t, db.SQL, "cairn", "tasks"), "server did not migrate the empty database")
	require.Contains(t, logs.String(), "msg=\"migration applied\" version=1 name=init")

	require.NoError(t, s.stop(t))
	_, err := net.DialTimeout("tcp", strings.TrimPrefix(s.url, "http://"), time.Second)
	require.Error(t, err, "still listening after run returned")
}

func TestNoMigrateLeavesSchemaAlone(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	readyCalled := false
	err := run(context.Background(), config{addr: "127.0.0.1:0", databaseURL: db.URL, schema: "cairn", noMigrate: true,
		logger: slog.New(slog.NewTextHandler(t.Output(), nil))}, func(string) { readyCalled = true })
	require.ErrorIs(t, err, store.ErrNotMigrated, "an unmigrated schema is refused with a clear error")
	require.False(t, readyCalled)

	var tables int
	require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = 'cairn'`).Scan(&tables))
	require.Zero(t, tables, "--no-migrate created tables")

	// Once migrated by hand, --no-migrate serves.
	pgtestMigrate(t, db)
	s := start(t, config{addr: "127.0.0.1:0", databaseURL: db.URL, schema: "cairn", noMigrate: true})
	code, body := get(t, s.url+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", body)
	require.NoError(t, s.stop(t))
}

func pgtestMigrate(t *testing.T, db *pgtest.DB) {
	t.Helper()
	r, err := migrations.NewRunner(db.SQL, "cairn")
	require.NoError(t, err)
	_, err = r.Up(context.Background(), 0)
	require.NoError(t, err)
}

func TestCustomSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	s := start(t, config{addr: "127.0.0.1:0", databaseURL: db.URL, schema: "tenant_a"})
	require.True(t, tableExists(t, db.SQL, "tenant_a", "tasks"))
	require.False(t, tableExists(t, db.SQL, "cairn", "tasks"))
	require.NoError(t, s.stop(t))
}

func TestUnreachableDatabaseFails(t *testing.T) {
	t.Parallel()
	// A port nobody listens on: take a free one and give it back.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	readyCalled := false
	err = run(context.Background(), config{addr: "127.0.0.1:0", schema: "cairn",
		databaseURL: "postgres://cairn:s3cret@" + addr + "/x?sslmode=disable",
		logger:      slog.New(slog.NewTextHandler(t.Output(), nil))},
		func(string) { readyCalled = true })
	require.ErrorContains(t, err, "connect to database")
	require.NotContains(t, err.Error(), "s3cret")
	require.False(t, readyCalled)
}

func TestUnreachableReadDatabaseFails(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	readyCalled := false
	err = run(context.Background(), config{addr: "127.0.0.1:0", schema: "cairn", databaseURL: db.URL,
		readDatabaseURL: "postgres://cairn:s3cret@" + addr + "/x?sslmode=disable",
		logger:          slog.New(slog.NewTextHandler(t.Output(), nil))},
		func(string) { readyCalled = true })
	require.ErrorContains(t, err, "connect to read database")
	require.NotContains(t, err.Error(), "s3cret")
	require.False(t, readyCalled)
}

func TestListenErrorIsReported(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })

	err = run(context.Background(), config{addr: ln.Addr().String(), databaseURL: db.URL, schema: "cairn",
		logger: slog.New(slog.NewTextHandler(t.Output(), nil))}, nil)
	require.ErrorContains(t, err, "listen on "+ln.Addr().String())
}

// TestPrivateCluster runs the server the way `make run` does without
// DATABASE_URL: a private cluster in <data-dir>/pg, stopped at the end.
func TestPrivateCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL cluster")
	}
	t.Parallel()
	dataDir := t.TempDir()
	// As root the cluster runs as the "postgres" user, which must be able
	// to reach the data directory.
	require.NoError(t, os.Chmod(filepath.Dir(dataDir), 0o755))
	require.NoError(t, os.Chmod(dataDir, 0o755))

	var log syncBuffer
	s := start(t, config{addr: "127.0.0.1:0", schema: "cairn", dataDir: dataDir,
		logger: slog.New(slog.NewTextHandler(io.MultiWriter(&log, t.Output()), nil))})
	code, body := get(t, s.url+"/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok", body)
	require.FileExists(t, filepath.Join(dataDir, "pg", "data", "PG_VERSION"))
	require.FileExists(t, filepath.Join(dataDir, "pg", "data", "postmaster.pid"))
	port, err := os.ReadFile(filepath.Join(dataDir, "pg", "port"))
	require.NoError(t, err, "the cluster keeps its port in <data-dir>/pg/port")
	psql := `psql="psql 'postgres://postgres@127.0.0.1:` + strings.TrimSpace(string(port)) + `/postgres?sslmode=disable'"`
	require.Contains(t, log.String(), psql, "the listening line says how to connect with psql")

	require.NoError(t, s.stop(t))
	require.NoFileExists(t, filepath.Join(dataDir, "pg", "data", "postmaster.pid"), "private cluster still running")

	// A second start in the same directory keeps the address.
	s = start(t, config{addr: "127.0.0.1:0", schema: "cairn", dataDir: dataDir,
		logger: slog.New(slog.NewTextHandler(io.MultiWriter(&log, t.Output()), nil))})
	require.NoError(t, s.stop(t))
	require.Equal(t, 2, strings.Count(log.String(), psql), "the second start uses the same port")
}

func TestParseConfig(t *testing.T) {
	t.Parallel()
	noEnv := func(string) string { return "" }

	cfg, err := parseConfig(nil, noEnv, io.Discard)
	require.NoError(t, err)
	require.Equal(t, config{addr: "127.0.0.1:8080", schema: "cairn", dataDir: ".cairn", heldHorizon: time.Minute}, cfg)

	env := map[string]string{
		"CAIRN_ADDR": ":9000", "DATABASE_URL": "postgres://env/db", "CAIRN_SCHEMA": "from_env",
		"CAIRN_ADMIN_PASSWORD": "adm", "CAIRN_READONLY_PASSWORD": "ro", "CAIRN_READ_DATABASE_URL": "postgres://replica/db",
		"CAIRN_HELD_HORIZON": "5m",
	}
	cfg, err = parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, config{addr: ":9000", databaseURL: "postgres://env/db", readDatabaseURL: "postgres://replica/db", schema: "from_env",
		adminPassword: "adm", readonlyPassword: "ro", dataDir: ".cairn", heldHorizon: 5 * time.Minute}, cfg)

	cfg, err = parseConfig([]string{"--addr", ":0", "--database-url", "postgres://flag/db", "--schema", "flag_schema",
		"--no-migrate", "--demo", "--admin-password", "a2", "--readonly-password", "r2", "--data-dir", "/tmp/x",
		"--read-database-url", "postgres://flag-replica/db", "--held-horizon", "90s"},
		func(k string) string { return env[k] }, io.Discard)
	require.NoError(t, err)
	require.Equal(t, config{addr: ":0", databaseURL: "postgres://flag/db", readDatabaseURL: "postgres://flag-replica/db", schema: "flag_schema", noMigrate: true,
		demo: true, adminPassword: "a2", readonlyPassword: "r2", dataDir: "/tmp/x", heldHorizon: 90 * time.Second}, cfg)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--schema", "Bad-Name"}, "invalid schema name"},
		{[]string{"serve"}, `unexpected argument "serve"`},
		{[]string{"--bogus"}, "flag provided but not defined"},
		{[]string{"--addr", ""}, "--addr must not be empty"},
		{[]string{"--held-horizon", "0s"}, "--held-horizon 0s: must be more than 0"},
		{[]string{"--held-horizon", "-1m"}, "must be more than 0"},
		{[]string{"--held-horizon", "soon"}, `invalid value "soon" for flag -held-horizon`},
	} {
		_, err := parseConfig(tc.args, noEnv, io.Discard)
		require.ErrorContains(t, err, tc.want, "args %q", tc.args)
	}

	var out bytes.Buffer
	_, err = parseConfig([]string{"-h"}, func(k string) string { return env[k] }, &out)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.Contains(t, out.String(), "-database-url")
	require.Contains(t, out.String(), "CAIRN_ADMIN_PASSWORD")
	require.Contains(t, out.String(), "CAIRN_READ_DATABASE_URL")
	require.Contains(t, out.String(), "CAIRN_HELD_HORIZON")
	require.NotContains(t, out.String(), "postgres://replica/db", "help shows a value from the environment")
	require.NotContains(t, out.String(), "postgres://env/db", "help shows a value from the environment")
	require.NotRegexp(t, `"adm"|"ro"`, out.String(), "help shows a password from the environment")
}

func TestDemoRemovesItsDirectory(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	var logs syncBuffer
	s := start(t, config{addr: "127.0.0.1:0", databaseURL: db.URL, schema: "cairn", demo: true,
		logger: slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil))})
	m := regexp.MustCompile(`msg="demo running[^\n]* dir=(\S+)`).FindStringSubmatch(logs.String())
	require.NotNil(t, m, "the demo logs its directory")
	dir := m[1]
	require.Contains(t, filepath.Base(dir), "cairn-demo-")
	info, err := os.Stat(dir)
	require.NoError(t, err, "the demo directory exists while the server runs")
	require.True(t, info.IsDir())
	require.NoError(t, os.WriteFile(filepath.Join(dir, "1.ready"), []byte("ready\n"), 0o644))

	require.NoError(t, s.stop(t))
	_, err = os.Stat(dir)
	require.ErrorIs(t, err, fs.ErrNotExist, "the demo directory is removed when run returns")
}
