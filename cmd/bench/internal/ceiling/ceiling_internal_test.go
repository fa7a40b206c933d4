package ceiling

import (
	"strings"
	"testing"

	"github.com/cairnhq/cairn/store"
)

func TestPgbenchVarsNamesEveryParameter(t *testing.T) {
	t.Parallel()
	got, err := pgbenchVars("SELECT $1::int, '$2' -- a: comment\n, $2 FROM x WHERE y = $1", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	if want := "SELECT :a::int, '$2' \n, :b FROM x WHERE y = :a"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	if _, err := pgbenchVars("SELECT $1, $2, $3", "a", "b"); err == nil || !strings.Contains(err.Error(), "$3") {
		t.Fatalf("a statement with more parameters than names gave %v", err)
	}
	if _, err := pgbenchVars("SELECT $1", "a", "b"); err == nil || !strings.Contains(err.Error(), "takes 1 parameters, not 2") {
		t.Fatalf("a statement with fewer parameters than names gave %v", err)
	}
}

// The store's claim and transition statements render with no parameter
// left over, whatever they become.
func TestPgbenchScriptsRenderTheStoresStatements(t *testing.T) {
	t.Parallel()
	st, err := store.New(nil, "cairn")
	if err != nil {
		t.Fatal(err)
	}
	script, err := Cairn(st, Params{Queue: "default", Batch: 256, Lease: 30_000_000_000})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"jsonb_to_recordset(:items::jsonb)", "FOR UPDATE OF t SKIP LOCKED", "LIMIT 256", "pg_notify(:events"} {
		if !strings.Contains(script.Text, want) {
			t.Errorf("the script lacks %q:\n%s", want, script.Text)
		}
	}
	if strings.Contains(script.Text, "$") {
		t.Errorf("the script keeps a $ parameter:\n%s", script.Text)
	}
}
