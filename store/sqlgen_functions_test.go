package store

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store/pgtest"
	"github.com/cairnhq/cairn/store/sqltext"
)

var dumpFunctions = flag.Bool("dump-functions", false, "print the bodies of the SQL functions the templates render (for a new migration)")

// functionBody renders stmt, a statement template of sql/ (?schema and
// ? placeholders), as the query of a function of the engine's schema:
// its tables unqualified (the function's search_path is its schema,
// SET search_path FROM CURRENT), each ? the next of args.
func functionBody(stmt string, args ...string) string {
	n := 0
	out, err := sqltext.Rewrite(stmt, true, '?', func(rest string) (string, int, error) {
		if strings.HasPrefix(rest, "?schema.") {
			return "", len("?schema."), nil
		}
		if n == len(args) {
			return "", 0, fmt.Errorf("more placeholders than the %d arguments", len(args))
		}
		n++
		return args[n-1], 1, nil
	})
	if err == nil && n < len(args) {
		err = fmt.Errorf("%d placeholders for %d arguments", n, len(args))
	}
	if err != nil {
		panic("functionBody: " + err.Error())
	}
	return out
}

// The channels of the schema a function lives in (see EventsChannel).
const (
	eventsChannelSQL  = `current_schema() || '_events'`
	readyChannelSQL   = `current_schema() || '_ready'`
	controlChannelSQL = `current_schema() || '_control'`
)

// sqlFunctions are the functions of the engine's schema whose query a
// statement template renders (migration 035 and later): the function,
// and the query it runs, as the templates render it.
func sqlFunctions() []namedSQL {
	return []namedSQL{
		{"run_insert_once", functionBody(runInsertStatement("p_wake AND to_status = 'ready'"),
			`'run_rows'`, `p_runs`, `'tasks'`, `p_templates`, eventsChannelSQL, readyChannelSQL, controlChannelSQL, `false`)},
		{"task_transition", functionBody(transitionText(false, false, false),
			`p_items`, `p_from`, `NULL`, eventsChannelSQL, readyChannelSQL, controlChannelSQL, `true`)},
	}
}

// The functions the engine shares with the SQL API run the queries the
// templates render: a template changed without a migration that
// replaces its function fails here.
func TestSQLFunctions(t *testing.T) {
	t.Parallel()
	db, _ := newTestStore(t)
	for _, f := range sqlFunctions() {
		var src string
		require.NoError(t, db.SQL.QueryRow(`SELECT p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			WHERE n.nspname = $1 AND p.proname = $2`, pgtest.Schema, f.name).Scan(&src), f.name)
		_, query, ok := strings.Cut(src, "RETURN QUERY\n")
		query, _, _ = strings.Cut(query, "\n;\nEND\n")
		if !ok || query != f.text {
			t.Errorf("function %s runs another query than its template renders: a migration must replace it "+
				"(go test ./store -run TestDumpFunctions -dump-functions -v prints the query)", f.name)
		}
	}
}

func TestDumpFunctions(t *testing.T) {
	if !*dumpFunctions {
		t.Skip("-dump-functions prints the functions' queries")
	}
	for _, f := range sqlFunctions() {
		fmt.Printf("==== %s\n%s\n", f.name, f.text)
	}
}
