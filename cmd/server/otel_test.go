package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"

	"github.com/cairnhq/cairn/store/pgtest"
)

func TestTracingEnabledFollowsTheOTELVariables(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env     map[string]string
		on      bool
		wantErr string
	}{
		{env: nil, on: false},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, on: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, on: false},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, on: false},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, on: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: `OTEL_TRACES_EXPORTER="zipkin"`},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			wantErr: `OTEL_EXPORTER_OTLP_PROTOCOL="grpc"`},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, wantErr: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="grpc"`},
	} {
		on, err := tracingEnabled(func(k string) string { return tc.env[k] })
		if tc.wantErr != "" {
			require.ErrorContains(t, err, tc.wantErr, "env %v", tc.env)
			continue
		}
		require.NoError(t, err, "env %v", tc.env)
		require.Equal(t, tc.on, on, "env %v", tc.env)
	}
	tp, stop, err := startTracing(context.Background(), nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Nil(t, tp, "no environment reader: off")
	stop()
}

// collector is an OTLP/HTTP endpoint that keeps the bodies posted to
// /v1/traces.
type collector struct {
	mu     sync.Mutex
	bodies [][]byte
	ts     *httptest.Server
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.ts = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			c.mu.Lock()
			c.bodies = append(c.bodies, body)
			c.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(c.ts.Close)
	return c
}

// received reports whether an exported body holds every one of parts
// (OTLP protobuf keeps strings as they are).
func (c *collector) received(parts ...string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	all := bytes.Join(c.bodies, nil)
	for _, p := range parts {
		if !bytes.Contains(all, []byte(p)) {
			return false
		}
	}
	return true
}

func TestStartTracingExportsAndFlushesOnStop(t *testing.T) {
	t.Parallel()
	c := newCollector(t)
	env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": c.ts.URL}
	tp, stop, err := startTracing(context.Background(), func(k string) string { return env[k] }, slog.New(slog.DiscardHandler),
		otlptracehttp.WithEndpointURL(c.ts.URL+"/v1/traces"))
	require.NoError(t, err)
	require.NotNil(t, tp)
	_, span := tp.Tracer("test").Start(context.Background(), "probe-span")
	span.End()
	stop()
	require.True(t, c.received("probe-span", "service.name", defaultServiceName), "the span is flushed at stop, with service.name")
}

// The server with OTEL_EXPORTER_OTLP_ENDPOINT exports its spans (here a
// request's) with OTEL_SERVICE_NAME, flushed when it shuts down.
//
// Not parallel: the exporter reads the process environment itself
// (t.Setenv).
func TestServerExportsTracesWhenAnEndpointIsSet(t *testing.T) {
	c := newCollector(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", c.ts.URL)
	t.Setenv("OTEL_SERVICE_NAME", "cairn-under-test")
	db := pgtest.NewEmpty(t)
	s := start(t, config{addr: "127.0.0.1:0", databaseURL: db.URL, schema: "cairn", otelEnv: os.Getenv})
	status, _ := get(t, s.url+"/healthz")
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, s.stop(t))
	require.True(t, c.received("GET /healthz", "/healthz", "cairn-under-test"), "the request's span, exported at shutdown")
}
