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

// maxLimitBucket is the largest literal LIMIT a claim statement is
// rendered with (see limitBucket).
const maxLimitBucket = 1 << 20

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

// The statements the store sends are those it sent when it assembled
// them from fragments at run time, byte for byte.
func TestStatementsAsAssembledBefore(t *testing.T) {
	s := &Store{schema: "cairn_gen"}
	check := func(name, before string) {
		t.Helper()
		if got := s.query(name); got != before {
			t.Errorf("%s differs from the statement assembled before", name)
		}
	}
	for n := minLimitBucket; n <= maxLimitBucket; n *= 2 {
		check(limitName("TaskClaim", n), s.claimQuery(n))
		check(limitName("TaskClaimKeyed", n), s.keyedClaimQuery(n))
		check(limitName("TaskFinishClaim", n), s.finishClaimQuery(n, false))
		check(limitName("TaskParkClaim", n), s.finishClaimQuery(n, true))
	}
	check("TaskClaimFloor", s.limitQuery("claimfloor", claimFloorSQL, 0))
	check("TaskKeyedFloor", s.limitQuery("keyedfloor", keyedFloorSQL, 0))
	for _, v := range [][3]bool{{false, false, false}, {true, false, false}, {false, true, false}, {true, true, false}, {true, false, true}} {
		check(transitionName(v[0], v[1], v[2]), s.transitionQuery(v[0], v[1], v[2]))
	}
	check("RunInsert", s.runInsertQuery())
	check("RunInsertQuiet", s.WithoutWake().runInsertQuery())
}
