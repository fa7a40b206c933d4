package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/web"
)

// TestAPIWriteWithoutJSONSaysSo: on a site without a password, an API
// client (no session cookie) that posts without Content-Type:
// application/json is refused as before, but told in JSON what the API
// needs rather than to reload a page. A browser (with the session cookie,
// or a form navigation) still hears about the CSRF token.
func TestAPIWriteWithoutJSONSaysSo(t *testing.T) {
	t.Parallel()
	e := setup(t, func(_ *engine.Config, wc *web.Config) {
		wc.AdminPassword, wc.ReadonlyPassword = "", ""
	})
	post := func(c *client, contentType string, header map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, e.ts.URL+"/api/queues/default/pause", strings.NewReader(`{}`))
		require.NoError(t, err)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		res, body := c.do(req)
		require.Equal(t, "application/json", strings.Split(res.Header.Get("Content-Type"), ";")[0], body)
		var msg struct{ Error string }
		require.NoError(t, json.Unmarshal([]byte(body), &msg), body)
		return res.StatusCode, msg.Error
	}

	curl := e.client(t) // no cookie: what curl -d sends
	code, msg := post(curl, "application/x-www-form-urlencoded", nil)
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, msg, "Content-Type: application/json")
	require.Contains(t, msg, `this one has Content-Type "application/x-www-form-urlencoded"`)
	require.NotContains(t, msg, "CSRF")
	code, msg = post(curl, "", nil)
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, msg, "this one has no Content-Type")

	// A browser's form submission without the cookie: the CSRF message.
	code, msg = post(curl, "application/x-www-form-urlencoded", map[string]string{"Sec-Fetch-Mode": "navigate"})
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, msg, "CSRF token")
	// A browser with its session cookie and no token: the CSRF message.
	browser := e.client(t)
	browser.doc("/", http.StatusOK)
	code, msg = post(browser, "application/json", nil)
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, msg, "CSRF token")

	q, err := e.st.QueueGet(context.Background(), "default")
	require.NoError(t, err)
	require.False(t, q.Paused, "no refused request changed anything")

	// With the header, the same call goes through.
	code, _ = post(curl, "application/json", nil)
	require.Equal(t, http.StatusOK, code)
}
