package tracing

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"sigs.k8s.io/agent-sandbox/internal/labels"
)

func withRecorder(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	return rec
}

// A trace recorded on an object (as the SDK records it on a claim) is the
// parent of the reconcile's span.
func TestStartJoinsTheObjectsTrace(t *testing.T) {
	rec := withRecorder(t)
	ctx, parent := Tracer().Start(context.Background(), "client")
	ann := Annotation(ctx)
	parent.End()
	if ann == "" {
		t.Fatal("no annotation for a valid span context")
	}
	obj := &metav1.ObjectMeta{Annotations: map[string]string{labels.TraceContext: ann}}
	_, span := Start(context.Background(), obj, "ReconcileSandbox")
	span.End()
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("%d spans", len(spans))
	}
	child := spans[1]
	if child.Name() != "ReconcileSandbox" || child.Parent().TraceID() != parent.SpanContext().TraceID() ||
		child.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("span %q has parent %v, want %v", child.Name(), child.Parent(), parent.SpanContext())
	}
}

func TestBadAnnotationsStartANewTrace(t *testing.T) {
	rec := withRecorder(t)
	for _, v := range []string{"", "not json", `{"traceparent":"garbage"}`, `["a"]`} {
		obj := &metav1.ObjectMeta{Annotations: map[string]string{labels.TraceContext: v}}
		_, span := Start(context.Background(), obj, "ReconcileSandboxClaim")
		span.End()
	}
	for _, s := range rec.Ended() {
		if s.Parent().IsValid() {
			t.Errorf("span has a parent from a bad annotation: %v", s.Parent())
		}
	}
	if Annotation(context.Background()) != "" {
		t.Error("annotation for a context without a span")
	}
}

// traceCollector is an OTLP/gRPC trace receiver on loopback.
type traceCollector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (c *traceCollector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.names = append(c.names, ss.Scope.GetName()+"/"+s.Name)
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func TestSetupExportsOverOTLP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &traceCollector{}
	srv := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(srv, col)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+l.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

	shutdown, err := Setup(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, span := Tracer().Start(context.Background(), "ReconcileSandboxTemplate", trace.WithTimestamp(time.Now()))
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatalf("flushing: %v", err)
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.names) != 1 || col.names[0] != Name+"/ReconcileSandboxTemplate" {
		t.Errorf("collector received %v", col.names)
	}
}
