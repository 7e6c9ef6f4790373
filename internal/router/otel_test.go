package router

import (
	"context"
	"net"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"
)

// fakeCollector is an OTLP/gRPC metrics receiver recording metric names.
type fakeCollector struct {
	colmetricpb.UnimplementedMetricsServiceServer
	mu    sync.Mutex
	names map[string]bool
}

func (c *fakeCollector) Export(_ context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rm := range req.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				c.names[m.Name] = true
			}
		}
	}
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

func TestOTelMetricsPush(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &fakeCollector{names: map[string]bool{}}
	gs := grpc.NewServer()
	colmetricpb.RegisterMetricsServiceServer(gs, col)
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()

	m := NewMetrics(BuildInfo{GitVersion: "test"})
	m.observeRequest("GET", 200, "default", 0.01)
	ctx := context.Background()
	mp, err := newOTelMetrics(ctx, m.Registry, otlpmetricgrpc.WithEndpoint(ln.Addr().String()), otlpmetricgrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.ForceFlush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	_ = mp.Shutdown(ctx)
	col.mu.Lock()
	defer col.mu.Unlock()
	for _, name := range []string{"sandbox_router_requests_total", "sandbox_router_request_duration_seconds", "sandbox_router_build_info"} {
		if !col.names[name] {
			t.Errorf("%s not pushed (got %v)", name, col.names)
		}
	}
}
