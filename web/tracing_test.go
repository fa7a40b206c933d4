package web_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairnhq/cairn/engine"
	"github.com/cairnhq/cairn/web"
)

// spanAttrs maps a span's attributes by key.
func spanAttrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// A site with a TracerProvider makes a server span per request, named
// after its route, with the status code; a traceparent sent by the
// client is its parent, and an enqueue through the API is its child.
func TestTraceSpansOfRequests(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(t.Context()) })
	e := setup(t, func(ec *engine.Config, wc *web.Config) {
		ec.TracerProvider = tp
		wc.TracerProvider = tp
	})
	c := e.loggedIn(t, adminPW)

	// The client's trace: a traceparent header.
	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, err := http.NewRequest(http.MethodPost, e.ts.URL+"/api/runs", strings.NewReader(`{"workflow":"wf"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-CSRF-Token", c.csrf)
	req.Header.Set("traceparent", "00-"+clientTrace+"-"+clientSpan+"-01")
	res, body := c.do(req)
	require.Equal(t, http.StatusCreated, res.StatusCode, body)
	var run struct {
		ID int64 `json:"id"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &run))
	res, body = c.get("/api/runs/" + strconv.FormatInt(run.ID, 10))
	require.Equal(t, http.StatusOK, res.StatusCode, body)
	res, _ = c.get("/no/such/page")
	require.Equal(t, http.StatusNotFound, res.StatusCode)
	anon := e.client(t)
	res, _ = anon.get("/api/runs")
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)
	res, _ = anon.post("/callbacks/secret-token", "application/json", `{}`)
	require.Equal(t, http.StatusForbidden, res.StatusCode)

	// A websocket upgrades through the span's response writer.
	u, err := url.Parse(e.ts.URL)
	require.NoError(t, err)
	header := http.Header{"Origin": {e.ts.URL}}
	for _, ck := range c.hc.Jar.Cookies(u) {
		header.Add("Cookie", ck.Name+"="+ck.Value)
	}
	conn, _, err := websocket.DefaultDialer.Dial("ws://"+u.Host+"/ws", header)
	require.NoError(t, err)
	require.NoError(t, conn.Close())

	byName := map[string]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byName[s.Name] = s // the last of each name
	}
	post, ok := byName["POST /api/runs"]
	require.True(t, ok, "a span for POST /api/runs among %v", names(exp))
	require.Equal(t, trace.SpanKindServer, post.SpanKind)
	a := spanAttrs(post)
	require.Equal(t, "/api/runs", a["http.route"].AsString())
	require.Equal(t, "POST", a["http.request.method"].AsString())
	require.EqualValues(t, http.StatusCreated, a["http.response.status_code"].AsInt64())
	require.Equal(t, clientTrace, post.SpanContext.TraceID().String(), "the client's trace goes on")
	require.Equal(t, clientSpan, post.Parent.SpanID().String())

	enq, ok := byName["enqueue wf"]
	require.True(t, ok, "the engine's enqueue span")
	require.Equal(t, post.SpanContext.SpanID(), enq.Parent.SpanID(), "the enqueue is a child of its request")

	get := byName["GET /api/runs/{id}"]
	require.EqualValues(t, http.StatusOK, spanAttrs(get)["http.response.status_code"].AsInt64())
	require.Equal(t, "/api/runs/{id}", spanAttrs(get)["http.route"].AsString())

	missing := byName["GET /"] // the pages' catch-all
	require.EqualValues(t, http.StatusNotFound, spanAttrs(missing)["http.response.status_code"].AsInt64())
	require.Equal(t, "/no/such/page", spanAttrs(missing)["url.path"].AsString())
	require.NotEqual(t, codes.Error, missing.Status.Code, "a 4xx is the client's error, not the server's")

	// The websocket's span ends when its handler returns.
	eventually(t, 10*time.Second, "the websocket's span", func() bool {
		for _, s := range exp.GetSpans() {
			if s.Name == "GET /ws" {
				return spanAttrs(s)["http.response.status_code"].AsInt64() == http.StatusSwitchingProtocols
			}
		}
		return false
	})

	// A callback URL's token, a credential, is not recorded.
	cb := byName["POST /callbacks/{token}"]
	require.Equal(t, "/callbacks/{token}", spanAttrs(cb)["url.path"].AsString())

	// Refused before the mux (no session): still named after its route.
	refused := byName["GET /api/runs"]
	require.EqualValues(t, http.StatusUnauthorized, spanAttrs(refused)["http.response.status_code"].AsInt64())
}

func names(exp *tracetest.InMemoryExporter) []string {
	var out []string
	for _, s := range exp.GetSpans() {
		out = append(out, s.Name)
	}
	return out
}
