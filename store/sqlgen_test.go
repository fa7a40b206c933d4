package store

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateSQL = flag.Bool("update", false, "rewrite sql/*.sql from the statement templates (sqlgen_test.go)")

// namedSQL is one statement of a file of sql/.
type namedSQL struct{ name, text string }

// sqlFile is one file of sql/: its comment and its statements.
type sqlFile struct {
	name    string
	comment string
	stmts   []namedSQL
}

// limitVariants are the statement name's variants at each literal LIMIT
// a claim takes (see limitBucket), rendered from text.
func limitVariants(name, text string) []namedSQL {
	var out []namedSQL
	for n := minLimitBucket; n <= maxLimitBucket; n *= 2 {
		out = append(out, namedSQL{limitName(name, n), strings.Replace(text, "/*limit*/", fmt.Sprint(n), 1)})
	}
	return out
}

const generated = `-- Rendered by sqlgen_test.go: go test ./store -run TestSQLFiles -update
-- (TestSQLFiles fails while this file differs from what it renders).
-- ?schema is the store's schema, each ? an argument ($1, $2... in order).
`

// renderedSQLFiles are the files of sql/ as the templates render them.
func renderedSQLFiles() []sqlFile {
	return []sqlFile{
		{"claim.sql", `-- The unkeyed claim (TaskClaim), one statement per literal LIMIT (see
-- limitBucket), and the read of a queue's claim floor (TaskClaimFloor).
`, append(limitVariants("TaskClaim", claimSQL), namedSQL{"TaskClaimFloor", claimFloorSQL})},
		{"claim_keyed.sql", `-- The claim of a worker that may claim keyed tasks (flow control), one
-- statement per literal LIMIT, and the read of a queue's keyed floor
-- (TaskKeyedFloor).
`, append(limitVariants("TaskClaimKeyed", keyedClaimSQL), namedSQL{"TaskKeyedFloor", keyedFloorSQL})},
		{"claim_finish.sql", `-- A worker's finished leaf tasks and its next claim in one statement
-- (TaskFinishAndClaimOne), one statement per literal LIMIT.
`, limitVariants("TaskFinishClaim", finishClaimSQL)},
		{"claim_park.sql", `-- A worker's parks (running -> deferred) and its next claim in one
-- statement (TaskParkAndClaimOne), one statement per literal LIMIT.
`, limitVariants("TaskParkClaim", parkClaimSQL)},
		{"transition.sql", `-- The compare-and-set transition of a batch of tasks (Transition), one
-- statement per kind of check: rows locked ahead (by anyone, by a worker,
-- with an expired lease, both), or a worker's rows in states it knows.
`, []namedSQL{
			{transitionName(false, false, false), transitionText(false, false, false)},
			{transitionName(true, false, false), transitionText(true, false, false)},
			{transitionName(false, true, false), transitionText(false, true, false)},
			{transitionName(true, true, false), transitionText(true, true, false)},
			{transitionName(true, false, true), transitionText(true, false, true)},
		}},
		{"run_insert.sql", `-- The insert of runs with their tasks (RunInsertMany), announcing the
-- queues of their ready tasks, and without (WithoutWake).
`, []namedSQL{{"RunInsert", runInsertSQL}, {"RunInsertQuiet", runInsertQuietSQL}}},
	}
}

func renderSQLFile(f sqlFile) (string, error) {
	var b strings.Builder
	b.WriteString(generated + f.comment + "\n")
	for _, st := range f.stmts {
		if strings.Contains(st.text, "\n"+nameMark) || strings.HasPrefix(st.text, nameMark) {
			return "", fmt.Errorf("%s: statement %s has a line starting %q", f.name, st.name, nameMark)
		}
		b.WriteString(nameMark + st.name + "\n" + st.text + "\n\n")
	}
	return b.String(), nil
}

// The committed sql/*.sql are what the templates render, and the store
// loads every statement of them as rendered.
func TestSQLFiles(t *testing.T) {
	want := map[string]bool{}
	for _, f := range renderedSQLFiles() {
		text, err := renderSQLFile(f)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("sql", f.name)
		want[path] = true
		if *updateSQL {
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != text {
			t.Errorf("%s differs from what the templates render: go test ./store -run TestSQLFiles -update", path)
		}
		parsed := map[string]string{}
		if err := parseStatements(path, text, parsed); err != nil {
			t.Fatal(err)
		}
		for _, st := range f.stmts {
			if statements[st.name] != st.text || parsed[st.name] != st.text {
				t.Errorf("%s: statement %s is not loaded as rendered", path, st.name)
			}
		}
	}
	files, err := filepath.Glob("sql/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !want[f] && !*updateSQL {
			t.Errorf("%s: no template renders it", f)
		}
	}
}

// The store sends the statements as it assembled them from the
// templates at run time before sql/ (limitQuery, transitionQuery), byte
// for byte, each variant under its name.
func TestStatementsAsAssembledBefore(t *testing.T) {
	s := &Store{schema: "cairn_gen"}
	limitQuery := func(sql string, limit int) string {
		return positional(strings.Replace(sql, "/*limit*/", fmt.Sprint(limit), 1), s.schema)
	}
	check := func(what, got, before string) {
		t.Helper()
		if got != before {
			t.Errorf("%s differs from the statement assembled before", what)
		}
	}
	for n := minLimitBucket; n <= maxLimitBucket; n *= 2 {
		check(fmt.Sprint("claim ", n), s.claimQuery(n), limitQuery(claimSQL, n))
		check(fmt.Sprint("keyed claim ", n), s.keyedClaimQuery(n), limitQuery(keyedClaimSQL, n))
		check(fmt.Sprint("finish and claim ", n), s.finishClaimQuery(n, false), limitQuery(finishClaimSQL, n))
		check(fmt.Sprint("park and claim ", n), s.finishClaimQuery(n, true), limitQuery(parkClaimSQL, n))
	}
	check("claim floor", s.query("TaskClaimFloor"), positional(claimFloorSQL, s.schema))
	check("keyed floor", s.query("TaskKeyedFloor"), positional(keyedFloorSQL, s.schema))
	for _, v := range [][3]bool{{false, false, false}, {true, false, false}, {false, true, false}, {true, true, false}, {true, false, true}} {
		check(fmt.Sprint("transition ", v), s.transitionQuery(v[0], v[1], v[2]), positional(transitionText(v[0], v[1], v[2]), s.schema))
	}
	check("run insert", s.runInsertQuery(), positional(runInsertSQL, s.schema))
	check("quiet run insert", s.WithoutWake().runInsertQuery(), positional(runInsertQuietSQL, s.schema))
	if limitBucket(maxLimitBucket+1) != maxLimitBucket || limitBucket(1) != minLimitBucket || limitBucket(33) != 64 {
		t.Error("limitBucket rounds up to a power of two from minLimitBucket to maxLimitBucket")
	}
}
