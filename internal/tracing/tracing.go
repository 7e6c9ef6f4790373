// Package tracing is the controller's OpenTelemetry tracing: an OTLP/gRPC
// exporter configured by the standard OTEL_EXPORTER_OTLP_* variables, the
// W3C TraceContext propagator, and the link between a trace and the objects
// it concerns through the opentelemetry.io/trace-context annotation (a JSON
// map of W3C headers, e.g. {"traceparent":"00-…-01"}), which the SDKs set
// on claims and the claim controller copies to Sandboxes.
//
// Until Setup runs, the global tracer provider is OpenTelemetry's no-op one:
// reconcilers start spans unconditionally and it costs them next to nothing.
package tracing

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// Name is both the service name and the tracer name.
const Name = "agent-sandbox-controller"

// initTimeout bounds the exporter's start; a collector that cannot be
// reached in that time makes the controller fail fast, not run blind.
const initTimeout = 10 * time.Second

// propagator carries trace context only (no baggage).
var propagator = propagation.TraceContext{}

// Setup installs the exporting tracer provider as the global one and
// returns the function that flushes and stops it.
func Setup(ctx context.Context) (func(context.Context) error, error) {
	ictx, cancel := context.WithTimeout(ctx, initTimeout)
	defer cancel()
	exp, err := otlptracegrpc.New(ictx)
	if err != nil {
		return nil, fmt.Errorf("starting the OTLP trace exporter (OTEL_EXPORTER_OTLP_ENDPOINT): %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", Name)))
	if err != nil {
		return nil, fmt.Errorf("building the trace resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	return tp.Shutdown, nil
}

// Tracer is the controller's tracer, from the global provider at call time.
func Tracer() trace.Tracer { return otel.Tracer(Name) }

// Start starts span name as a child of the trace recorded on obj, if any,
// else of whatever ctx carries.
func Start(ctx context.Context, obj metav1.Object, name string) (context.Context, trace.Span) {
	return Tracer().Start(FromObject(ctx, obj), name)
}

// FromObject returns ctx with the remote span context recorded in obj's
// trace-context annotation. A missing or malformed annotation leaves ctx
// as it is: a user-written annotation must never break a reconcile.
func FromObject(ctx context.Context, obj metav1.Object) context.Context {
	raw := obj.GetAnnotations()[labels.TraceContext]
	if raw == "" {
		return ctx
	}
	var carrier map[string]string
	if err := json.Unmarshal([]byte(raw), &carrier); err != nil {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier(carrier))
}

// Annotation renders the span context in ctx as the trace-context
// annotation's value, or "" when ctx carries no valid span context.
func Annotation(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagator.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return ""
	}
	data, err := json.Marshal(map[string]string(carrier))
	if err != nil {
		return ""
	}
	return string(data)
}

// End ends span, marking it failed when err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
