package sandbox

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Span attribute keys.
const (
	attrClaimName         = "sandbox.claim.name"
	attrCommandExecutable = "sandbox.command.executable"
	attrExitCode          = "sandbox.exit_code"
	attrFilePath          = "sandbox.file.path"
	attrFileSize          = "sandbox.file.size"
	attrFileCount         = "sandbox.file.count"
	attrFileExists        = "sandbox.file.exists"
	attrGatewayName       = "sandbox.gateway.name"
	attrGatewayNamespace  = "sandbox.gateway.namespace"
	attrRequestID         = "sandbox.request_id"
)

// NewTracerProvider returns a TracerProvider exporting spans over OTLP/gRPC
// to the endpoint of the standard OTEL_EXPORTER_OTLP_* environment
// variables, with service.name = serviceName. Pass it as
// Options.TracerProvider and Shutdown it before the program exits.
func NewTracerProvider(ctx context.Context, serviceName string) (*sdktrace.TracerProvider, error) {
	if serviceName == "" {
		serviceName = DefaultTraceServiceName
	}
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("sandbox: creating OTLP trace exporter: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attribute.String("service.name", serviceName)))
	if err != nil {
		return nil, fmt.Errorf("sandbox: building trace resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}
