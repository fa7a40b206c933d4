package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHostileInputRefused: values PostgreSQL cannot take (NUL bytes,
// invalid UTF-8, lone surrogates, numbers beyond numeric or int4) in query
// parameters, paths, forms and JSON bodies get a 400 naming the field,
// and change nothing.
func TestHostileInputRefused(t *testing.T) {
	t.Parallel()
	e, c := quietEnv(t, io.Discard)
	form := func(kv ...string) string {
		v := url.Values{"csrf_token": {c.csrf}}
		for i := 0; i+1 < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v.Encode()
	}
	cases := []struct {
		method, path, body, field string
	}{
		// Query parameters, on the API, pages and fragments.
		{"GET", "/api/runs?workflow=wf%00", "", "workflow"},
		{"GET", "/api/runs?q=a%00:1", "", "q"},
		{"GET", "/api/runs?status=failed%00", "", "status"},
		{"GET", "/api/runs?workflow=%FF%FE", "", "workflow"},
		{"GET", "/runs?workflow=wf%00", "", "workflow"},
		{"GET", "/runs?q=%FF:1", "", "q"},
		{"GET", "/fragments/runs?status=%00", "", "status"},
		{"GET", "/api/runs?q=" + url.QueryEscape(`a:"\u0000"`), "", "search term a"},
		{"GET", "/api/runs?q=" + url.QueryEscape(`a:"\ud800"`), "", "search term a"},
		{"GET", "/api/runs?from=0000-01-01", "", "from"},
		{"GET", "/api/runs?after=999999999999999999_1", "", "after"},
		{"GET", "/api/runs?workflow=w%07x", "", "workflow"},
		// Path names.
		{"POST", "/api/queues/default%00/pause", "", "path"},
		{"POST", "/api/queues/%FF%FE/resume", "", "path"},
		{"POST", "/api/queues/a%07b/pause", "", "queue name"},
		{"POST", "/api/schedules/nightly%00/fire", "", "path"},
		{"POST", "/api/schedules/nightly%0A/pause", "", "schedule name"},
		{"POST", "/queues/default%00/pause", form(), "path"},
		{"POST", "/schedules/%FF/resume", form(), "path"},
		// JSON bodies.
		{"POST", "/api/runs", `{"workflow":"wf","input":{"a":"\u0000"}}`, "input"},
		{"POST", "/api/runs", `{"workflow":"wf","input":{"a":"\ud800"}}`, "input"},
		{"POST", "/api/runs", `{"workflow":"wf","input":{"a":1e1000000}}`, "input"},
		{"POST", "/api/runs", `{"workflow":"wf","key":"k\u0000"}`, "key"},
		{"POST", "/api/runs", `{"workflow":"wf","key":"\ud800"}`, "key"},
		{"POST", "/api/runs", "{\"workflow\":\"wf\",\"key\":\"\xff\xfe\"}", "key"},
		{"POST", "/api/runs", `{"workflow":"wf","priority":99999999999}`, "priority"},
		{"POST", "/api/runs", `{"workflow":"wf","key":"k","unique_for":"soon"}`, "unique_for"},
		{"POST", "/api/runs", `{"workflow":"wf","key":"k","unique_for":"-1h"}`, "unique_for"},
		{"POST", "/api/runs", `{"workflow":"wf","unique_for":"1h"}`, "unique_for"},
		{"POST", "/api/runs", `{"workflow":"wf","priority":1e1000000}`, "priority"},
		{"POST", "/api/runs", `{"workflow":"wf\u0000"}`, "workflow"},
		{"POST", "/api/runs", `{"workflow":"wf","queue":"q\u0000"}`, "queue"},
		{"POST", "/api/runs", `{"workflow":"wf","queue":"q\u0007"}`, "queue"},
		{"POST", "/api/queues/default/cap", `{"max_running":99999999999}`, "max_running"},
		{"POST", "/api/queues/default/cap", `{"max_running":-1}`, "max_running"},
		{"POST", "/api/runs/bulk", `{"action":"cancel","filter":{"workflow":"\u0000"}}`, "filter"},
		{"POST", "/api/runs/bulk", `{"action":"cancel","filter":{"q":"a:\"\\ud800\""}}`, "search term a"},
		// Forms.
		{"POST", "/runs", form("workflow", "wf", "key", "\xff\xfe"), "key"},
		{"POST", "/runs", form("workflow", "wf", "key", "k\x00"), "key"},
		{"POST", "/runs", form("workflow", "wf", "input", `{"a":"\u0000"}`), "input"},
		{"POST", "/runs", form("workflow", "wf", "input", `{"a":"\ud800"}`), "input"},
		{"POST", "/runs", form("workflow", "wf", "input", `{"a":1e1000000}`), "input"},
		{"POST", "/runs", form("workflow", "wf", "input", "{\"a\":\"\xff\"}"), "input"},
		{"POST", "/queues/default/cap", form("max_running", "99999999999"), "max_running"},
		{"POST", "/runs/bulk", form("action", "cancel", "workflow", "\x00"), "workflow"},
		{"POST", "/runs/bulk", form("action", "cancel", "confirm", "yes", "q", "\xff"), "q"},
	}
	before := fingerprint(t, e.db.SQL)
	for _, tc := range cases {
		req, err := http.NewRequest(tc.method, e.ts.URL+tc.path, strings.NewReader(tc.body))
		require.NoError(t, err)
		if strings.HasPrefix(tc.path, "/api/") {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-CSRF-Token", c.csrf)
		} else if tc.method == "POST" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		res, body := c.do(req)
		what := tc.method + " " + tc.path + " " + tc.body
		require.Equal(t, http.StatusBadRequest, res.StatusCode, "%s: %s", what, body)
		if strings.HasPrefix(tc.path, "/api/") {
			var out struct{ Error string }
			require.NoError(t, json.Unmarshal([]byte(body), &out), what)
			require.Contains(t, out.Error, tc.field, what)
		} else {
			require.Contains(t, body, tc.field, what)
		}
	}
	require.Equal(t, before, fingerprint(t, e.db.SQL), "a refused request changed rows")
}

// TestHostileButValidInputAccepted: a search for a number PostgreSQL
// cannot hold matches it as text instead of failing, and the valid
// neighbours of refused values are taken.
func TestHostileButValidInputAccepted(t *testing.T) {
	t.Parallel()
	e, c := quietEnv(t, io.Discard)
	for _, p := range []string{
		"/api/runs?q=" + url.QueryEscape("a:1e1000000"),
		"/api/runs?q=" + url.QueryEscape("a:[1e1000000]"),
		"/api/runs?q=" + url.QueryEscape(`a:["\ud800"]`), // JSON jsonb refuses: matched as text
		"/runs?q=" + url.QueryEscape("amount:1e1000000"),
		"/api/runs?q=" + url.QueryEscape("customer:acme") + "&workflow=" + url.QueryEscape("ünï ✓"),
	} {
		res, body := c.get(p)
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", p, body)
	}
	res, body := c.get("/api/runs?q=" + url.QueryEscape("customer:acme"))
	require.Equal(t, http.StatusOK, res.StatusCode)
	require.Contains(t, body, `"acme"`)

	res, body = c.postJSON("/api/runs/bulk", `{"action":"cancel","dry_run":true,"filter":{"q":"a:1e1000000"}}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)

	res, body = c.postJSON("/api/runs", `{"workflow":"wf","key":"ключ ✓","priority":-2147483648,"input":{"a":"\\u0000","b":"\ud83d\ude00","c":1e131071}}`)
	require.Equal(t, http.StatusCreated, res.StatusCode, body)
	res, body = c.postJSON("/api/queues/default/cap", `{"max_running":2147483647}`)
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	_ = e
}
