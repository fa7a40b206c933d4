package store

import "testing"

func TestPositional(t *testing.T) {
	t.Parallel()
	in := "SELECT ?, '?' FROM ?schema.t -- it's ?\nWHERE a = ?::int AND b = '?schema'"
	want := "SELECT $1, '?' FROM \"cairn\".t -- it's ?\nWHERE a = $2::int AND b = '?schema'"
	if got := positional(in, "cairn"); got != want {
		t.Fatalf("positional:\n got %q\nwant %q", got, want)
	}
}
