package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/store"
)

// jsonCases are JSON texts CheckJSON judges; ok says whether PostgreSQL
// takes them as jsonb.
var jsonCases = []struct {
	in string
	ok bool
}{
	{`{}`, true},
	{`{"a":"\u0000"}`, false},
	{`{"a\u0000":1}`, false},
	{`{"a":"\\u0000"}`, true}, // an escaped backslash, then text
	{`{"a":"\ud800"}`, false},
	{`{"a":"\udc00"}`, false},
	{`{"a":"\ud800x"}`, false},
	{`{"a":"\ud800\u0041"}`, false},
	{`{"a":"\ud800\ud800\udc00"}`, false},
	{`{"a":"\ud800\udc00"}`, true},
	{`{"a":"\uD83D\uDE00"}`, true},
	{`{"a":1e1000000}`, false},
	{`{"a":-1e1000000}`, false},
	{`{"a":1e131071}`, true},
	{`{"a":1E+131071}`, true},
	{`{"a":1e131072}`, false},
	{`{"a":10e131071}`, false},
	{`{"a":0.0001e131075}`, true},
	{`{"a":123456789e131063}`, true},
	{`{"a":123456789e131064}`, false},
	{`{"a":1e-16383}`, true},
	{`{"a":1e-16384}`, false},
	{`{"a":1.5e-16383}`, false},
	{`{"a":0e-20000}`, false},
	{`{"a":0e99999999}`, true},
	{`{"a":1e99999999999999999999}`, false},
	{`{"a":[1,-2.5e3,{"b":[0.1]}]}`, true},
	{`{"a":` + strings.Repeat("9", 131072) + `}`, true},
	{`{"a":` + strings.Repeat("9", 131073) + `}`, false},
	{`{"a":0.` + strings.Repeat("1", 16383) + `}`, true},
	{`{"a":0.` + strings.Repeat("1", 16384) + `}`, false},
	{`{"a":`, false},
	{"{\"a\":\"\xff\"}", false},
	{"{\"a\":\"\x00\"}", false},
}

// TestCheckJSONAgreesWithPostgres checks every case with CheckJSON and
// with PostgreSQL itself: they must agree.
func TestCheckJSONAgreesWithPostgres(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, c := range jsonCases {
		name := c.in
		if len(name) > 60 {
			name = name[:60]
		}
		err := store.CheckJSON([]byte(c.in))
		require.Equal(t, c.ok, err == nil, "CheckJSON(%q): %v", name, err)
		var s string
		pgErr := b.db.SQL.QueryRow(`SELECT left($1::jsonb::text, 10)`, c.in).Scan(&s)
		require.Equal(t, c.ok, pgErr == nil, "PostgreSQL on %q: %v", name, pgErr)
	}
}

func TestCheckText(t *testing.T) {
	t.Parallel()
	require.NoError(t, store.CheckText("héllo ✓"))
	require.ErrorContains(t, store.CheckText("a\x00b"), "NUL")
	require.ErrorContains(t, store.CheckText("a\xff\xfeb"), "UTF-8")
}

// TestInvalidValuesSendNoSQL: every kind of store entry point refuses a
// value PostgreSQL cannot take with ErrInvalidValue, and writes nothing.
func TestInvalidValuesSendNoSQL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	bad := func(p store.RunInsertParams) []store.RunInsertParams {
		return []store.RunInsertParams{p}
	}
	withInput := func(in string) store.RunInsertParams {
		p := single(1)[0]
		p.Input = json.RawMessage(in)
		return p
	}
	key := "k\xff\xfe"
	nulKey := "k\x00"
	cases := map[string]func() error{
		"run workflow NUL": func() error {
			p := single(1)[0]
			p.Workflow = "one\x00"
			_, err := b.st.RunInsertMany(ctx, bad(p))
			return err
		},
		"run key UTF-8": func() error { p := single(1)[0]; p.Key = &key; _, err := b.st.RunInsertMany(ctx, bad(p)); return err },
		"run key NUL": func() error {
			p := single(1)[0]
			p.Key = &nulKey
			_, err := b.st.RunInsertMany(ctx, bad(p))
			return err
		},
		"run input \\u0000": func() error {
			_, err := b.st.RunInsertMany(ctx, bad(withInput(`{"a":"\u0000"}`)))
			return err
		},
		"run input surrogate": func() error { _, err := b.st.RunInsertMany(ctx, bad(withInput(`{"a":"\ud800"}`))); return err },
		"run input 1e1000000": func() error { _, err := b.st.RunInsertMany(ctx, bad(withInput(`{"a":1e1000000}`))); return err },
		"run priority": func() error {
			p := single(1)[0]
			p.Priority = 99999999999
			_, err := b.st.RunInsertMany(ctx, bad(p))
			return err
		},
		"queue ensure NUL": func() error { return b.st.QueueEnsure(ctx, []string{"ok", "q\x00"}) },
		"queue pause NUL":  func() error { return b.st.QueueSetPaused(ctx, "default\x00", true) },
		"queue cap int4": func() error {
			n := 99999999999
			return b.st.QueueSetCap(ctx, "default", &n)
		},
		"schedule get UTF-8": func() error { _, err := b.st.ScheduleGet(ctx, "s\xff"); return err },
		"list workflow NUL": func() error {
			_, err := b.st.RunListFiltered(ctx, &store.RunListParams{Workflow: "w\x00"})
			return err
		},
		"list statuses NUL": func() error {
			_, err := b.st.RunListFiltered(ctx, &store.RunListParams{Statuses: []string{"failed", "x\x00"}})
			return err
		},
		"list search number": func() error {
			_, err := b.st.RunListFiltered(ctx, &store.RunListParams{InputMatch: [][]json.RawMessage{{json.RawMessage(`{"a":1e1000000}`)}}})
			return err
		},
	}
	before := rowCounts(t, b)
	for name, call := range cases {
		err := call()
		require.ErrorIs(t, err, store.ErrInvalidValue, name)
	}
	require.Equal(t, before, rowCounts(t, b), "a refused call wrote something")
	q, err := b.st.QueueGet(ctx, "default")
	require.NoError(t, err)
	require.Nil(t, q.MaxRunning)
}

func rowCounts(t *testing.T, b bundle) string {
	t.Helper()
	var s string
	require.NoError(t, b.db.SQL.QueryRow(`SELECT concat_ws(',', (SELECT count(*) FROM cairn.runs), (SELECT count(*) FROM cairn.tasks),
		(SELECT count(*) FROM cairn.queues), (SELECT count(*) FROM cairn.schedules), (SELECT count(*) FROM cairn.task_events))`).Scan(&s))
	return s
}
