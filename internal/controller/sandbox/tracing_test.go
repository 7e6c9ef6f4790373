package sandbox

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/tracing"
)

// A Sandbox carrying a trace context (as the claim controller copies it
// from a claim the SDK traced) is reconciled inside that trace: the
// ReconcileSandbox span is the client span's child, with reconcilePod
// under it and the Pod's creation recorded as an event.
func TestReconcileJoinsTheSandboxTrace(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })

	ctx, client := tracing.Tracer().Start(context.Background(), "client")
	client.End()
	b := makeSandbox(newNamespace(t), "traced")
	b.sb.Annotations = map[string]string{labels.TraceContext: tracing.Annotation(ctx)}
	sb := b.create(t)

	deadline := time.Now().Add(20 * time.Second)
	for {
		var reconcile, pod bool
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() != client.SpanContext().TraceID() {
				continue
			}
			switch s.Name() {
			case "ReconcileSandbox":
				reconcile = reconcile || s.Parent().SpanID() == client.SpanContext().SpanID()
			case "reconcilePod":
				for _, e := range s.Events() {
					if e.Name == "NewPodStatusObserved" || e.Name == "ExistingPodStatusObserved" {
						pod = true
					}
				}
			}
		}
		if reconcile && pod {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: ReconcileSandbox under the client span %v, reconcilePod with a pod event %v", sb.Name, reconcile, pod)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
