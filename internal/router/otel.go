package router

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	promBridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// serviceName identifies the router in traces and pushed metrics.
const serviceName = "sandbox-router"

func otelResource() (*resource.Resource, error) {
	r, err := resource.Merge(resource.Default(),
		// Schemaless so the merge never conflicts with the SDK's schema.
		resource.NewSchemaless(attribute.String("service.name", serviceName)))
	if err != nil {
		return nil, fmt.Errorf("building OTel resource: %w", err)
	}
	return r, nil
}

// tracing is the router's OpenTelemetry tracing setup.
type tracing struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	shutdown   func(context.Context) error
}

// newTracing starts an OTLP/gRPC trace exporter configured by the standard
// OTEL_EXPORTER_OTLP_* environment variables.
func newTracing(ctx context.Context) (*tracing, error) {
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("creating OTLP trace exporter: %w", err)
	}
	res, err := otelResource()
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return &tracing{
		tracer:     tp.Tracer(serviceName),
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		shutdown:   tp.Shutdown,
	}, nil
}

// newOTelMetrics pushes the Prometheus registry over OTLP/gRPC (through the
// Prometheus bridge, so both paths report the same series). The exporter is
// configured by OTEL_EXPORTER_OTLP_* unless opts say otherwise.
func newOTelMetrics(ctx context.Context, reg prometheus.Gatherer, opts ...otlpmetricgrpc.Option) (*sdkmetric.MeterProvider, error) {
	exp, err := otlpmetricgrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("creating OTLP metric exporter: %w", err)
	}
	res, err := otelResource()
	if err != nil {
		return nil, err
	}
	reader := sdkmetric.NewPeriodicReader(exp,
		sdkmetric.WithProducer(promBridge.NewMetricProducer(promBridge.WithGatherer(reg))))
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res)), nil
}
