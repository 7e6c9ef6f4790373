package claim_test

import (
	"context"
	"fmt"
	"testing"

	"sigs.k8s.io/agent-sandbox/internal/controller/claim"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// With the real pool controller pacing its refill (one create per 5 s)
// and Pods held before they get an IP: two claims take the pool's two
// members, and the two claims after them find at most one replacement
// created. They wait for the refill still to be created instead of going
// cold, and each ends up with one of the pool's replacements, not a
// Sandbox of its own.
func TestClaimsWaitForTheRefillThePoolPaces(t *testing.T) {
	opts := defaults()
	opts.MaxRefillRate = 0.2
	w := newWorld(t, opts)
	w.readyPool("pool", 2, nil)
	w.gate.Close()
	for _, c := range []string{"c1", "c2"} {
		w.claim(c, "pool", nil)
	}
	exttest.Eventually(t, wait, func() error {
		for _, c := range []string{"c1", "c2"} {
			if n := w.getClaim(c).Status.SandboxStatus.Name; n == "" || n == c {
				return fmt.Errorf("%s bound %q, want a member of the pool", c, n)
			}
		}
		return nil
	})
	w.claim("c3", "pool", nil)
	w.claim("c4", "pool", nil)
	for _, c := range []string{"c3", "c4"} {
		exttest.Eventually(t, wait, func() error {
			return hasEvent(w, c, claim.ReasonWaitingForWarmSandbox, "the pool is still to create")
		})
	}
	// Both replacements exist before the Pods may start.
	exttest.Eventually(t, wait, func() error {
		n := 0
		for _, sb := range w.sandboxes() {
			if sb.Labels[labels.WarmPoolSandbox] != "" {
				n++
			}
		}
		if n < 2 {
			return fmt.Errorf("%d replacements created, want 2", n)
		}
		return nil
	})
	if err := w.gate.Open(context.Background(), w.c, w.ns); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"c3", "c4"} {
		if sb := w.waitReady(c); sb.Name == c {
			t.Fatalf("%s went cold", c)
		}
		owned := 0
		for _, sb := range w.sandboxes() {
			if sb.Labels[labels.ClaimUID] == string(w.getClaim(c).UID) {
				owned++
			}
		}
		if owned != 1 {
			t.Fatalf("%s owns %d sandboxes, want 1", c, owned)
		}
	}
}
