package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// defaultServiceName is the service.name of the server's spans unless
// OTEL_SERVICE_NAME says otherwise.
const defaultServiceName = "cairn"

// tracingFlushTimeout bounds the export of the last spans at shutdown.
const tracingFlushTimeout = 5 * time.Second

// tracingEnabled decides from the standard OpenTelemetry variables (read
// with getenv) whether the server exports traces: OTEL_TRACES_EXPORTER
// "otlp", or unset with an OTLP endpoint set (OTEL_EXPORTER_OTLP_ENDPOINT
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT). OTEL_SDK_DISABLED=true and
// OTEL_TRACES_EXPORTER=none turn it off. A value the server cannot honour
// (another exporter, the grpc protocol) is an error naming the variable.
func tracingEnabled(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	on := false
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "":
		on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	case "otlp":
		on = true
	case "none":
		return false, nil
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: the server exports traces with otlp (or none)", exp)
	}
	if !on {
		return false, nil
	}
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(v)); p != "" {
			if p != "http/protobuf" {
				return false, fmt.Errorf("%s=%q: the server exports OTLP over HTTP only (http/protobuf)", v, p)
			}
			break // the traces variable wins over the general one
		}
	}
	return true, nil
}

// startTracing builds the server's tracer provider when tracingEnabled
// says so: an OTLP/HTTP exporter configured by the standard OTEL_*
// variables (it reads them itself: endpoint, headers, timeout,
// compression, certificates), batched, with service.name from
// OTEL_SERVICE_NAME (default "cairn") and OTEL_RESOURCE_ATTRIBUTES.
// opts override the exporter's settings (tests). It returns a nil
// provider when tracing is off, and a function that flushes and stops
// the provider (a no-op when off).
func startTracing(ctx context.Context, getenv func(string) string, logger *slog.Logger, opts ...otlptracehttp.Option) (trace.TracerProvider, func(), error) {
	if getenv == nil {
		return nil, func() {}, nil
	}
	on, err := tracingEnabled(getenv)
	if err != nil || !on {
		return nil, func() {}, err
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(defaultServiceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the default
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	// Export failures (a collector down) are logged, not fatal.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("OpenTelemetry", slog.String("error", err.Error()))
	}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	service, _ := res.Set().Value(semconv.ServiceNameKey)
	logger.InfoContext(ctx, "exporting traces with OTLP", slog.String("service", cmp.Or(service.AsString(), defaultServiceName)))
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), tracingFlushTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			logger.Error("flush traces", slog.String("error", err.Error()))
		}
	}
	return tp, stop, nil
}
