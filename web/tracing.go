package web

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of the site's spans.
const TracerName = "github.com/cairnhq/cairn/web"

// traced wraps the site's handler with a server span per request
// (OpenTelemetry's HTTP conventions: method, path, route, status code),
// a child of the request's W3C traceparent when it has one. Handlers see
// the span in the request's context, so an enqueue through the site is a
// child of its request. Without a provider (tp nil) next is returned as
// it is.
func traced(tp trace.TracerProvider, next http.Handler) http.Handler {
	if tp == nil {
		return next
	}
	tr := tp.Tracer(TracerName)
	var w3c propagation.TraceContext
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := w3c.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		method := spanMethod(r.Method)
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		ctx, span := tr.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
			semconv.HTTPRequestMethodKey.String(method),
			semconv.URLPath(spanPath(r.URL.Path)),
			semconv.URLScheme(scheme),
		))
		defer span.End()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r.WithContext(ctx))
		status := rec.status
		if status == 0 {
			status = http.StatusOK // nothing written: net/http answers 200
		}
		span.SetAttributes(semconv.HTTPResponseStatusCode(status))
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	})
}

// routeTagged serves next, then names the request's span after the
// route of mux that takes the request (http.route, from its pattern),
// also when a middleware answered before the mux (a 401 or 403). Without
// a recording span it only serves next.
func routeTagged(mux *http.ServeMux, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		span := trace.SpanFromContext(r.Context())
		if !span.IsRecording() {
			return
		}
		_, route := mux.Handler(r)
		if route == "" {
			return
		}
		if _, path, ok := strings.Cut(route, " "); ok {
			route = path // "GET /runs/{id}": the method is the span's already
		}
		if i := strings.IndexByte(route, '/'); i > 0 {
			route = route[i:] // a host pattern
		}
		route = strings.TrimSuffix(route, "{$}")
		span.SetName(spanMethod(r.Method) + " " + route)
		span.SetAttributes(semconv.HTTPRoute(route))
	})
}

// spanMethod is the http.request.method of a request: the method when
// it is a known one, else "_OTHER" (the conventions' bound on the
// attribute's values).
func spanMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// statusRecorder remembers the status code written through it. It passes
// Hijack (websockets) and Flush on, and unwraps for
// http.ResponseController.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("web: response writer cannot hijack")
	}
	conn, rw, err := h.Hijack()
	if err == nil && s.status == 0 {
		s.status = http.StatusSwitchingProtocols
	}
	return conn, rw, err
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// spanPath is the path a span records: a callback URL's token is a
// credential, so it is left out.
func spanPath(path string) string {
	if isCallback(path) {
		return callbackPrefix + "{token}"
	}
	return path
}
