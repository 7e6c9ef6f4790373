package router

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestTracingAndAccessLog(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prop := propagation.TraceContext{}
	seen := make(chan string, 1)
	be := backend(t, "127.0.0.1", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("traceparent")
		fmt.Fprint(w, "ok")
	}))
	var lines []string
	al := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	h := newHarness(t, harnessOpts{tracer: tp.Tracer("test"), propagator: prop, accessLog: &al})
	h.addSandbox(sandboxSpec{name: "sb", addr: be})

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req := h.request("GET", "/traced", "sb", be, nil)
	req.Header.Set("traceparent", parent)
	resp := mustDo(t, req)
	resp.Body.Close()
	out := <-seen
	if !strings.HasPrefix(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-") || out == parent {
		t.Fatalf("upstream traceparent %q: want same trace, new span", out)
	}
	h.stop() // flush the handler's deferred span end and log line
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "HTTP GET" || spans[0].Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("spans %v", spans)
	}
	attrs := map[string]string{}
	for _, kv := range spans[0].Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["http.method"] != "GET" || attrs["http.target"] != "/traced" || attrs["sandbox.id"] != "sb" ||
		attrs["sandbox.namespace"] != "" || attrs["http.status_code"] != "200" {
		t.Fatalf("attributes %v", attrs)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `"sandbox_id"="sb"`) || !strings.Contains(lines[0], `"status"=200`) ||
		!strings.Contains(lines[0], `"trace_id"="4bf92f3577b34da6a3ce929d0e0e4736"`) {
		t.Fatalf("access log %v", lines)
	}
}
