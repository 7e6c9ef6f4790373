package router

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
)

// TestGRPCPassThrough runs unary, server-streaming and bidirectional gRPC
// calls through the router's plain port (prior-knowledge h2c) to a real gRPC
// server, which the upstream router cannot do.
func TestGRPCPassThrough(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.6:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("sandboxd", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	be := netip.MustParseAddrPort(ln.Addr().String())

	h := newHarness(t, harnessOpts{})
	h.addSandbox(sandboxSpec{name: "sb", addr: be})

	conn, err := grpc.NewClient("passthrough:///"+h.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(),
		"x-sandbox-id", "sb", "x-sandbox-port", fmt.Sprint(be.Port()))

	hc := healthpb.NewHealthClient(conn)
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "sandboxd"})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("unary: %v %v", resp, err)
	}
	// gRPC status codes come through intact, also from a Trailers-Only
	// response (status in the only HEADERS frame), whose headers the proxy's
	// immediate flush used to send without ending the stream now and then;
	// repeated so that the race shows.
	for i := 0; i < 300; i++ {
		_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "missing"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("trailer status (call %d): %v", i, err)
		}
	}

	// Server streaming: the second message is produced only after the client
	// received the first.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ws, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{Service: "sandboxd"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := ws.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch 1: %v %v", m, err)
	}
	hs.SetServingStatus("sandboxd", healthpb.HealthCheckResponse_NOT_SERVING)
	if m, err := ws.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("watch 2: %v %v", m, err)
	}
	cancel()

	// Bidirectional: request/response ping-pong on one stream.
	rs, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := rs.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		m, err := rs.Recv()
		if err != nil || len(m.GetListServicesResponse().GetService()) == 0 {
			t.Fatalf("bidi round %d: %v %v", i, m, err)
		}
	}
	_ = rs.CloseSend()

	// Routing failures surface as gRPC errors, not hangs.
	bad := metadata.AppendToOutgoingContext(context.Background(), "x-sandbox-id", "nope", "x-sandbox-port", "1")
	if _, err := hc.Check(bad, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("unknown sandbox must fail")
	}
}
