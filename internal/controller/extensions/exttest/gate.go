package exttest

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ReadyGate holds new Pods not Ready (no IP) while closed, so a test can
// freeze the warm pool's refill and make the outcome of a claim burst
// deterministic. Use its Ready method as the kubelet's Ready func.
type ReadyGate struct{ closed atomic.Bool }

// Ready is the kubelet decision: Ready unless the gate is closed.
func (g *ReadyGate) Ready(*corev1.Pod) bool { return !g.closed.Load() }

// Close holds Pods the kubelet syncs from now on.
func (g *ReadyGate) Close() { g.closed.Store(true) }

// Open lets Pods become Ready and touches every Pod of ns that is not, so
// the kubelet (which only acts on Pod events) syncs it again.
func (g *ReadyGate) Open(ctx context.Context, c client.Client, ns string) error {
	g.closed.Store(false)
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if len(p.Status.PodIPs) > 0 || p.DeletionTimestamp != nil {
			continue
		}
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"test.agents.x-k8s.io/nudge":%q}}}`, time.Now().Format(time.RFC3339Nano))
		if err := c.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("nudging pod %s: %w", p.Name, err)
		}
	}
	return nil
}
