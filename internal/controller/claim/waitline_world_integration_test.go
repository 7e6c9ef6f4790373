package claim_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/agent-sandbox/internal/controller/claim"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// With the real pool controller refilling and Pods held before they get an
// IP: the claim that finds the refill's member starting waits for it and
// says so in an event; the claim after it, for which nothing is starting,
// goes cold at once and its event says why. When the Pods come up the
// waiter holds the refill's member, not a Sandbox of its own.
func TestWaitingAndColdFallbackEvents(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 1, nil)
	w.gate.Close()
	w.claim("c1", "pool", nil)
	// Bound is enough: with the gate closed the kubelet may report the
	// adopted member's Pod not Ready again when it re-syncs it.
	exttest.Eventually(t, wait, func() error {
		if n := w.getClaim("c1").Status.SandboxStatus.Name; n == "" || n == "c1" {
			return fmt.Errorf("c1 bound %q, want the pool's member", n)
		}
		return nil
	})
	// The refill's replacement exists and has no IP (the gate holds it).
	exttest.Eventually(t, wait, func() error {
		for _, sb := range w.sandboxes() {
			if sb.Labels[labels.WarmPoolSandbox] != "" && len(sb.Status.PodIPs) == 0 {
				return nil
			}
		}
		return fmt.Errorf("no starting pool member yet")
	})
	w.claim("c2", "pool", nil)
	exttest.Eventually(t, wait, func() error { return hasEvent(w, "c2", claim.ReasonWaitingForWarmSandbox, " starting and ") })
	w.claim("c3", "pool", nil)
	exttest.Eventually(t, wait, func() error {
		// The exact counts depend on how fast the pool refills; the
		// fixture tests pin them.
		return hasEvent(w, "c3", claim.ReasonColdStartFallback, "claims wait ahead of it for")
	})
	if sb, err := w.sandbox("c2"); err == nil {
		t.Fatalf("c2 created its own sandbox %s while its member was starting", sb.Name)
	}
	if err := w.gate.Open(context.Background(), w.c, w.ns); err != nil {
		t.Fatal(err)
	}
	if sb := w.waitReady("c2"); sb.Name == "c2" {
		t.Fatal("c2 went cold")
	}
	if sb := w.waitReady("c3"); sb.Name != "c3" {
		t.Fatalf("c3 bound %s, want its cold sandbox", sb.Name)
	}
	var owned int
	for _, sb := range w.sandboxes() {
		if sb.Labels[labels.ClaimUID] == string(w.getClaim("c2").UID) {
			owned++
		}
	}
	if owned != 1 {
		t.Fatalf("c2 owns %d sandboxes, want 1", owned)
	}
}

func hasEvent(w *world, claimName, reason, note string) error {
	var evs eventsv1.EventList
	if err := w.c.List(context.Background(), &evs, client.InNamespace(w.ns)); err != nil {
		return err
	}
	var seen []string
	for _, e := range evs.Items {
		if e.Regarding.Kind != "SandboxClaim" || e.Regarding.Name != claimName {
			continue
		}
		if e.Reason == reason && strings.Contains(e.Note, note) {
			return nil
		}
		seen = append(seen, e.Reason+": "+e.Note)
	}
	return fmt.Errorf("claim %s: no %s event mentioning %q; events %q", claimName, reason, note, seen)
}
