package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/migrations"
	"github.com/cairnhq/cairn/store/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// result is what one invocation of the CLI produced.
type result struct {
	code           int
	stdout, stderr string
}

// migrate runs the CLI with args and no environment.
func migrate(t *testing.T, args ...string) result {
	t.Helper()
	return migrateEnv(t, map[string]string{}, args...)
}

func migrateEnv(t *testing.T, env map[string]string, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := runEnv(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return result{code: code, stdout: out.String(), stderr: errOut.String()}
}

// requireOK fails unless the invocation succeeded quietly on stderr.
func requireOK(t *testing.T, r result) {
	t.Helper()
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.Empty(t, r.stderr)
}

// requireOneErrorLine fails unless the invocation exited 1 with exactly one
// "migrate: " line on stderr containing want.
func requireOneErrorLine(t *testing.T, r result, want string) {
	t.Helper()
	require.Equal(t, 1, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	require.Len(t, lines, 1, "stderr:\n%s", r.stderr)
	require.True(t, strings.HasPrefix(lines[0], "migrate: "), "stderr: %q", r.stderr)
	require.Contains(t, lines[0], want)
	require.NotContains(t, r.stderr, "goroutine", "stack trace on stderr")
}

func allMigrations(t *testing.T) []migrations.Migration {
	t.Helper()
	all, err := migrations.All()
	require.NoError(t, err)
	require.NotEmpty(t, all)
	return all
}

func countTables(t *testing.T, db *sql.DB, schema string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&n))
	return n
}

func appliedVersions(t *testing.T, db *sql.DB, schema string) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(`SELECT count(*) FROM `+schema+`.schema_migrations`).Scan(&n))
	return n
}

// label is how progress lines name a migration: 001_init.
func label(m migrations.Migration) string { return fmt.Sprintf("%03d_%s", m.Version, m.Name) }

// statusRow matches the start of one migration's row of `status` in state.
func statusRow(m migrations.Migration, state string) string {
	return fmt.Sprintf(`(?m)^%03d\s+%s\s+%s\s+`, m.Version, regexp.QuoteMeta(m.Name), state)
}

// progressLines returns the per-migration lines ("applied 001_init (2ms)")
// of verb in out.
func progressLines(out, verb string) []string {
	return regexp.MustCompile(`(?m)^`+verb+`\s+\d{3}_\S+ \(\S+\)$`).FindAllString(out, -1)
}

func TestUpStatusDownLifecycle(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	all := allMigrations(t)

	r := migrate(t, "status", "--database-url", db.URL)
	requireOK(t, r)
	for _, m := range all {
		require.Regexp(t, statusRow(m, "pending"), r.stdout)
	}
	require.Contains(t, r.stdout, "0 applied")

	r = migrate(t, "--database-url", db.URL, "up")
	requireOK(t, r)
	lines := progressLines(r.stdout, "applied")
	require.Len(t, lines, len(all), "stdout:\n%s", r.stdout)
	for i, m := range all {
		require.Contains(t, lines[i], label(m))
	}
	require.Contains(t, r.stdout, "applied "+plural(len(all)))
	require.Equal(t, len(all), appliedVersions(t, db.SQL, "cairn"))
	require.Positive(t, countTables(t, db.SQL, "cairn"))

	r = migrate(t, "--database-url", db.URL, "up")
	requireOK(t, r)
	require.Contains(t, r.stdout, "nothing to apply")

	r = migrate(t, "status", "--database-url", db.URL)
	requireOK(t, r)
	for _, m := range all {
		require.Regexp(t, statusRow(m, "applied")+`\d{4}-\d\d-\d\dT`, r.stdout)
	}

	r = migrate(t, "--database-url", db.URL, "down", "--all")
	requireOK(t, r)
	require.Contains(t, r.stdout, "reverted "+plural(len(all)))
	require.Zero(t, countTables(t, db.SQL, "cairn"), "down --all left tables in schema cairn")

	r = migrate(t, "--database-url", db.URL, "up")
	requireOK(t, r)
	require.Equal(t, len(all), appliedVersions(t, db.SQL, "cairn"))
	var tasks int
	require.NoError(t, db.SQL.QueryRow(`SELECT count(*) FROM cairn.tasks`).Scan(&tasks))
}

func TestDownRevertsExactlyOne(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	all := allMigrations(t)
	requireOK(t, migrate(t, "up", "--database-url", db.URL))

	r := migrate(t, "down", "--database-url", db.URL)
	requireOK(t, r)
	last := all[len(all)-1]
	lines := progressLines(r.stdout, "reverted")
	require.Len(t, lines, 1, "stdout:\n%s", r.stdout)
	require.Contains(t, lines[0], label(last))
	require.Equal(t, len(all)-1, appliedVersions(t, db.SQL, "cairn"))

	r = migrate(t, "status", "--database-url", db.URL)
	requireOK(t, r)
	require.Regexp(t, statusRow(last, "pending"), r.stdout)
}

func TestUpWithCount(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	all := allMigrations(t)
	r := migrate(t, "up", "1", "--database-url", db.URL)
	requireOK(t, r)
	require.Equal(t, 1, appliedVersions(t, db.SQL, "cairn"))
	require.Contains(t, r.stdout, "applied 1 migration to schema cairn")
	require.Contains(t, r.stdout, "; "+strconv.Itoa(len(all)-1)+" pending")
}

func TestCustomSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	requireOK(t, migrate(t, "--schema", "other", "--database-url", db.URL, "up"))
	require.Positive(t, countTables(t, db.SQL, "other"))
	require.Zero(t, countTables(t, db.SQL, "cairn"), "--schema other touched schema cairn")

	r := migrate(t, "status", "--schema", "other", "--database-url", db.URL)
	requireOK(t, r)
	require.Contains(t, r.stdout, "schema other: "+strconv.Itoa(len(allMigrations(t)))+" applied, 0 pending")

	requireOK(t, migrate(t, "down", "--all", "--schema", "other", "--database-url", db.URL))
	require.Zero(t, countTables(t, db.SQL, "other"))
}

func TestEnvironment(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	env := map[string]string{"DATABASE_URL": db.URL, "CAIRN_SCHEMA": "from_env"}
	requireOK(t, migrateEnv(t, env, "up"))
	require.Positive(t, countTables(t, db.SQL, "from_env"))

	// The flag wins over the environment.
	requireOK(t, migrateEnv(t, env, "up", "--schema", "flag_schema"))
	require.Positive(t, countTables(t, db.SQL, "flag_schema"))
}

func TestBadDatabaseURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, url, want string }{
		{"unreachable", "postgres://nope:1/x?connect_timeout=2", "connect to database"},
		{"malformed", "::not a url", "connect to database"},
		{"bad port with password", "postgres://user:s3cret@host:port/db", "connect to database"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := migrate(t, "status", "--database-url", tc.url)
			requireOneErrorLine(t, r, tc.want)
			require.NotContains(t, r.stderr, "s3cret", "password leaked")
		})
	}
}

// TestSilentServerTimesOut checks that a server which accepts connections
// but never answers fails within the ping timeout instead of hanging.
func TestSilentServerTimesOut(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	start := time.Now()
	r := migrate(t, "status", "--database-url", "postgres://u@"+ln.Addr().String()+"/x?sslmode=disable")
	requireOneErrorLine(t, r, "no answer within "+pingTimeout.String())
	require.Less(t, time.Since(start), pingTimeout+5*time.Second)
}

func TestNoDatabaseURL(t *testing.T) {
	t.Parallel()
	r := migrate(t, "up")
	requireOneErrorLine(t, r, "set --database-url or DATABASE_URL")
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown command", []string{"sideways"}, `unknown command "sideways"`},
		{"no command", nil, "no command given"},
		{"bad count", []string{"up", "two"}, `bad count "two"`},
		{"zero count", []string{"down", "0"}, `bad count "0"`},
		{"two counts", []string{"up", "1", "2"}, "at most one count"},
		{"count and all", []string{"down", "2", "--all"}, "not both"},
		{"all without down", []string{"up", "--all"}, "--all only applies to down"},
		{"unknown flag", []string{"up", "--bogus"}, "flag provided but not defined: -bogus"},
		{"create without name", []string{"create"}, "create takes one NAME"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := migrate(t, tc.args...)
			require.Equal(t, 1, r.code)
			first, rest, _ := strings.Cut(r.stderr, "\n")
			require.True(t, strings.HasPrefix(first, "migrate: "), "stderr: %q", r.stderr)
			require.Contains(t, first, tc.want)
			require.Contains(t, rest, "Usage: migrate", "usage errors print the usage")
			require.Empty(t, r.stdout)
		})
	}
}

func TestBadSchema(t *testing.T) {
	t.Parallel()
	r := migrate(t, "status", "--schema", "Bad-Name", "--database-url", "postgres://x/y")
	requireOneErrorLine(t, r, `invalid schema name "Bad-Name"`)
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"-h", "--help"} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"status", arg}, &out, &errOut)
		require.Equal(t, 0, code)
		require.Contains(t, out.String(), "Usage: migrate")
		require.Empty(t, errOut.String())
	}
}

func TestCreate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := migrate(t, "create", "add_tags", "--dir", dir)
	requireOK(t, r)
	up, down := filepath.Join(dir, "001_add_tags.up.sql"), filepath.Join(dir, "001_add_tags.down.sql")
	require.FileExists(t, up)
	require.FileExists(t, down)
	require.Contains(t, r.stdout, up)
	require.Contains(t, r.stdout, down)

	requireOK(t, migrate(t, "--dir", dir, "create", "more"))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 4)
	require.FileExists(t, filepath.Join(dir, "002_more.up.sql"))

	requireOneErrorLine(t, migrate(t, "create", "Bad Name!", "--dir", dir), "invalid migration name")
}
