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
// a claim takes (see limitBucket), rendered by text.
func limitVariants(name string, text func(limit int) string) []namedSQL {
	var out []namedSQL
	for n := minLimitBucket; n <= maxLimitBucket; n *= 2 {
		out = append(out, namedSQL{limitName(name, n), text(n)})
	}
	return out
}

func finishClaimLimit(limit int) string { return finishClaimSQL(limit, false) }
func parkClaimLimit(limit int) string   { return finishClaimSQL(limit, true) }

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
-- statement for every batch size, and the read of a queue's keyed floor
-- (TaskKeyedFloor).
`, []namedSQL{{"TaskClaimKeyed", keyedClaimSQL()}, {"TaskKeyedFloor", keyedFloorSQL}}},
		{"claim_finish.sql", `-- A worker's finished leaf tasks and its next claim in one statement
-- (TaskFinishAndClaimOne), one statement per literal LIMIT.
`, limitVariants("TaskFinishClaim", finishClaimLimit)},
		{"claim_park.sql", `-- A worker's parks (running -> deferred) and its next claim in one
-- statement (TaskParkAndClaimOne), one statement per literal LIMIT.
`, limitVariants("TaskParkClaim", parkClaimLimit)},
		{"claim_finish_keyed.sql", `-- A worker's finished leaf tasks and its next claim of keyed and unkeyed
-- tasks in one statement (TaskFinishAndClaimOne of a keyed claim), one
-- statement for every batch size.
`, []namedSQL{{"TaskFinishClaimKeyed", finishKeyedClaimSQL()}}},
		{"transition.sql", `-- The compare-and-set transition of a batch of tasks (Transition), one
-- statement per kind of check: rows locked ahead by a worker, with an
-- expired lease, both, or a worker's rows in states it knows. The rows
-- locked ahead by anyone are moved by the function task_transition
-- (sql/functions.sql), whose query the same template renders.
`, []namedSQL{
			{transitionName(true, false, false), transitionText(true, false, false)},
			{transitionName(false, true, false), transitionText(false, true, false)},
			{transitionName(true, true, false), transitionText(true, true, false)},
			{transitionName(true, false, true), transitionText(true, false, true)},
		}},
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
		if want[f] {
			continue
		}
		// Written by hand: it must parse, and not claim to be rendered.
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(string(b), generated) {
			t.Errorf("%s: no template renders it", f)
		}
		if err := parseStatements(f, string(b), map[string]string{}); err != nil {
			t.Error(err)
		}
	}
}

// The store sends each variant of the claim and transition statements
// under its name as the templates render it (TestSQLFiles holds the
// files to the templates, which render them byte for byte as the store
// assembled them at run time before sql/ existed).
func TestStatementsByName(t *testing.T) {
	s := &Store{schema: "cairn_gen"}
	check := func(what, got, want string) {
		t.Helper()
		if got != positional(want, s.schema) {
			t.Errorf("the store sends another statement for the %s", what)
		}
	}
	for n := minLimitBucket; n <= maxLimitBucket; n *= 2 {
		check(fmt.Sprint("claim ", n), s.claimQuery(n), claimSQL(n))
		check(fmt.Sprint("finish and claim ", n), s.finishClaimQuery(n, false), finishClaimSQL(n, false))
		check(fmt.Sprint("park and claim ", n), s.finishClaimQuery(n, true), finishClaimSQL(n, true))
	}
	check("keyed claim", s.keyedClaimQuery(), keyedClaimSQL())
	check("finish and keyed claim", s.finishKeyedClaimQuery(), finishKeyedClaimSQL())
	check("claim floor", s.query("TaskClaimFloor"), claimFloorSQL)
	check("keyed floor", s.query("TaskKeyedFloor"), keyedFloorSQL)
	for _, v := range [][3]bool{{true, false, false}, {false, true, false}, {true, true, false}, {true, false, true}} {
		check(fmt.Sprint("transition ", v), s.transitionQuery(v[0], v[1], v[2]), transitionText(v[0], v[1], v[2]))
	}
	if limitBucket(maxLimitBucket+1) != maxLimitBucket || limitBucket(1) != minLimitBucket || limitBucket(33) != 64 {
		t.Error("limitBucket rounds up to a power of two from minLimitBucket to maxLimitBucket")
	}
}

// limitName names each variant without allocating on the claim's path.
func TestLimitName(t *testing.T) {
	for n := minLimitBucket; n <= maxLimitBucket; n *= 2 {
		for _, name := range []string{"TaskClaim", "TaskFinishClaim", "TaskParkClaim"} {
			if got, want := limitName(name, n), fmt.Sprint(name, "Limit", n); got != want {
				t.Fatalf("limitName(%s, %d) = %s, want %s", name, n, got, want)
			}
		}
	}
	if a := testing.AllocsPerRun(100, func() { _ = limitName("TaskClaim", 256) }); a != 0 {
		t.Errorf("limitName allocates %.0f times", a)
	}
}
