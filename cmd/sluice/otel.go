package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracingHelp is the part of `sluice serve -h` about traces.
const tracingHelp = `Traces (OpenTelemetry, OTLP over HTTP) are off unless the standard environment asks for them:
  OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT   where to send (e.g. http://127.0.0.1:4318)
  OTEL_TRACES_EXPORTER=otlp   on, to the default endpoint http://localhost:4318 (none: off)
  OTEL_SDK_DISABLED=true      off, whatever else is set
  OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf (the default) if set; grpc is not built in
  OTEL_SERVICE_NAME (default sluice), OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER(_ARG),
  OTEL_EXPORTER_OTLP_HEADERS, OTEL_BSP_* and the other OTLP exporter variables are honoured.
`

// tracerProvider is the tracer provider the standard OTEL_* environment
// asks for, with its shutdown (which flushes the spans still queued), or
// nil when tracing is off: when none of OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and OTEL_TRACES_EXPORTER is set, when
// OTEL_TRACES_EXPORTER is none, or when OTEL_SDK_DISABLED is true.
//
// Spans go over OTLP/HTTP only: every collector (the OpenTelemetry
// Collector, Jaeger, Tempo, the vendors' agents) takes it, and the gRPC
// exporter would link gRPC into the binary for no capability the HTTP one
// lacks. A protocol the build does not speak is an error naming the
// variable, not spans silently sent to a port that will not read them.
func tracerProvider(ctx context.Context, getenv func(string) string, log *slog.Logger) (trace.TracerProvider, func(context.Context) error, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, nil, nil
	}
	exporters := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))
	for e := range strings.SplitSeq(exporters, ",") {
		switch strings.TrimSpace(e) {
		case "none":
			return nil, nil, nil
		case "", "otlp":
		default:
			return nil, nil, fmt.Errorf("OTEL_TRACES_EXPORTER: %q: sluice exports traces with otlp only (or none)", exporters)
		}
	}
	if exporters == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, nil, nil
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if p := strings.TrimSpace(getenv(name)); p != "" {
			if p != "http/protobuf" {
				return nil, nil, fmt.Errorf("%s: %q: sluice sends OTLP over HTTP only (http/protobuf, usually port 4318)", name, p)
			}
			break // the traces' own setting wins
		}
	}
	// The exporter reads the rest of OTEL_EXPORTER_OTLP_* itself:
	// endpoint, headers, timeout, compression, certificates.
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	// service.name defaults to sluice; OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES, read later, override it.
	res, err := resource.New(ctx, resource.WithAttributes(attribute.String("service.name", "sluice")),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	// The SDK reads OTEL_TRACES_SAMPLER(_ARG) and OTEL_BSP_* itself; the
	// default samples every trace a caller did not mark unsampled.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	// The SDK's own errors (a collector that cannot be reached) go to
	// the gateway's log, in its format, rather than to a logger of the
	// SDK's.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	return tp, tp.Shutdown, nil
}
