package store

import (
	"context"
	"encoding/json"
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

// The run insert's joins are linear in the runs it inserts. Planned on
// CTEs of unknown size, the task insert's join with the runs inserted
// and with the tasks' flow keys were nested loops comparing every pair:
// an enqueue of 2,000 keyed runs compared 8 million (and ran at 4,500
// runs/s, against 28,000 since). The query is explained as the function
// runs it, on the test schema, over 300 keyed runs in a transaction
// rolled back.
func TestRunInsertComparesNoPairOfRuns(t *testing.T) {
	t.Parallel()
	db, _ := newTestStore(t)
	ctx := context.Background()
	conc := &FlowTemplate{Group: "tenant", Path: []string{"t"}, Max: 10}
	var ps []RunInsertParams
	for i := range 300 {
		ps = append(ps, RunInsertParams{Workflow: "w", Queue: "default", Input: json.RawMessage(fmt.Sprintf(`{"t": "k%d"}`, i%7)),
			Tasks: []TaskTemplate{{Idx: 0, Name: "t", MaxAttempts: 3, MaxRescues: 3, Deps: []int{}, Dependents: []int{}, Concurrency: conc}}})
	}
	runs, templates, err := runInsertArgs(ps, nil)
	require.NoError(t, err)
	query := functionBody(runInsertStatement("false"), `'run_rows'`, `$1`, `'tasks'`, `$2`,
		eventsChannelSQL, readyChannelSQL, controlChannelSQL, `false`)
	tx, err := db.SQL.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, `SET LOCAL search_path = `+pgtest.Schema)
	require.NoError(t, err)
	rows, err := tx.QueryContext(ctx, "EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) "+query, string(runs), string(templates))
	require.NoError(t, err)
	var plan []string
	compared := 0
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan = append(plan, line)
		if _, n, ok := strings.Cut(line, "Rows Removed by Join Filter: "); ok {
			var removed int
			_, err := fmt.Sscan(n, &removed)
			require.NoError(t, err)
			compared += removed
		}
	}
	require.NoError(t, rows.Err())
	var tasks int
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT count(*) FROM tasks`).Scan(&tasks))
	require.Equal(t, 300, tasks, "the runs' tasks, with their flow keys")
	var keyed int
	require.NoError(t, tx.QueryRowContext(ctx, `SELECT count(*) FROM tasks WHERE conc_key = 'c' || chr(31) || 'tenant' || chr(31) || 'k3'`).Scan(&keyed))
	require.Equal(t, 43, keyed, "the tasks of key k3")
	require.Less(t, compared, 300, "no join compares pairs of runs:\n%s", strings.Join(plan, "\n"))
}
