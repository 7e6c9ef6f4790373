package claim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// warmClaimAnnotations serves one warm claim with opts and returns the
// claim's annotations once it is Ready and, when want is set, carries
// those annotations.
func warmClaimAnnotations(t *testing.T, opts extensions.Options, want ...string) (*world, map[string]string, string) {
	t.Helper()
	w := newWorld(t, opts)
	w.readyPool("pool", 1, nil)
	w.claim("c1", "pool", nil)
	sb := w.waitReady("c1")
	if sb.Name == "c1" {
		t.Fatal("claim went cold; the test needs a warm adoption")
	}
	exttest.Eventually(t, wait, func() error {
		for _, k := range want {
			if _, ok := w.getClaim("c1").Annotations[k]; !ok {
				return fmt.Errorf("annotation %s not written", k)
			}
		}
		return nil
	})
	return w, w.getClaim("c1").Annotations, sb.Name
}

// --reference-compatible-writes restores the published controller's
// default claim writes: both observability annotations, the sandbox-name
// annotation of a warm adoption, and the SandboxAdopted event.
func TestReferenceCompatibleWrites(t *testing.T) {
	opts := defaults()
	opts.ReferenceCompatibleWrites = true
	w, anns, sb := warmClaimAnnotations(t, opts, labels.ControllerFirstObservedAt, labels.SandboxName, labels.ClaimFirstReadyAt)
	if first, err := time.Parse(time.RFC3339Nano, anns[labels.ControllerFirstObservedAt]); err != nil || first.Nanosecond() == 0 {
		t.Errorf("controller-first-observed-at = %q (%v), want RFC3339Nano with sub-second precision", anns[labels.ControllerFirstObservedAt], err)
	}
	if anns[labels.SandboxName] != sb {
		t.Errorf("sandbox-name = %q, want the adopted %q", anns[labels.SandboxName], sb)
	}
	if _, err := time.Parse(time.RFC3339Nano, anns[labels.ClaimFirstReadyAt]); err != nil {
		t.Errorf("claim-first-ready-at = %q", anns[labels.ClaimFirstReadyAt])
	}
	exttest.Eventually(t, wait, func() error { return (eventsList{}).expect(w, "SandboxClaim", "c1", "SandboxAdopted") })
}

// The published --disable-claim-observability-annotations keeps its
// meaning under --reference-compatible-writes: no observability
// annotations, while the sandbox-name record is still written.
func TestReferenceCompatibleWritesWithDisabledObservabilityAnnotations(t *testing.T) {
	opts := defaults()
	opts.ReferenceCompatibleWrites = true
	opts.DisableClaimObservabilityAnnotations = true
	w, anns, sb := warmClaimAnnotations(t, opts, labels.SandboxName)
	if anns[labels.SandboxName] != sb {
		t.Errorf("sandbox-name = %q, want %q", anns[labels.SandboxName], sb)
	}
	exttest.Consistently(t, time.Second, func() error {
		for _, k := range []string{labels.ControllerFirstObservedAt, labels.ClaimFirstReadyAt} {
			if v, ok := w.getClaim("c1").Annotations[k]; ok {
				return fmt.Errorf("annotation %s=%q written despite --disable-claim-observability-annotations", k, v)
			}
		}
		return nil
	})
}

// By default none of those writes happen (3 writes per warm claim).
func TestNoReferenceWritesByDefault(t *testing.T) {
	w, _, _ := warmClaimAnnotations(t, defaults())
	exttest.Consistently(t, time.Second, func() error {
		for _, k := range []string{labels.ControllerFirstObservedAt, labels.ClaimFirstReadyAt, labels.SandboxName} {
			if v, ok := w.getClaim("c1").Annotations[k]; ok {
				return fmt.Errorf("annotation %s=%q written by default", k, v)
			}
		}
		return nil
	})
}

// The InvalidMetadata message is the published controller's, word for
// word: clients (SDKs, hosts) show it verbatim and some match on it.
func TestInvalidMetadataMessageMatchesReference(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 0, nil)
	w.claim("router", "pool", func(c *extv1beta1.SandboxClaim) {
		c.Spec.AdditionalPodMetadata.Labels = map[string]string{"app": "sandbox-router"}
	})
	w.claim("domain", "pool", func(c *extv1beta1.SandboxClaim) {
		c.Spec.AdditionalPodMetadata.Labels = map[string]string{"evil.example.com/hack": "x"}
	})
	w.waitReason("router", extv1beta1.ClaimReasonInvalidMetadata,
		`invalid additionalPodMetadata: failed to validate label "app": restricted system label value: "app"="sandbox-router" is not allowed in AdditionalPodMetadata`)
	w.waitReason("domain", extv1beta1.ClaimReasonInvalidMetadata,
		`invalid additionalPodMetadata: failed to validate label "evil.example.com/hack": label domain "evil.example.com" is not in the allowlist (configure the allowed-label-domains key of the agent-sandbox-config ConfigMap in the controller namespace; default: sandbox.users.io)`)
}

// occurrences counts the Warning events with reason about a claim,
// including repetitions folded into an event series.
func occurrences(w *world, claim, reason string) (int, error) {
	var evs eventsv1.EventList
	if err := w.c.List(context.Background(), &evs, client.InNamespace(w.ns)); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range evs.Items {
		if e.Regarding.Kind != "SandboxClaim" || e.Regarding.Name != claim || e.Reason != reason {
			continue
		}
		if e.Type != "Warning" {
			return 0, fmt.Errorf("%s event of type %s", reason, e.Type)
		}
		n++
		if e.Series != nil {
			n += int(e.Series.Count) - 1
		}
	}
	return n, nil
}

// A claim that fails gets a Warning event by default, written after its
// status, once per failure: further reconciles of the same failure (here
// forced by metadata edits, which re-enqueue the claim) add none.
func TestFailureEventsByDefault(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 0, nil)
	cases := map[string]struct {
		pool, reason string
		edit         func(*extv1beta1.SandboxClaim)
	}{
		"no-pool": {pool: "nope", reason: extv1beta1.ClaimReasonWarmPoolNotFound},
		"env": {pool: "pool", reason: extv1beta1.ClaimReasonEnvVarsInjectionRejected, edit: func(c *extv1beta1.SandboxClaim) {
			c.Spec.Env = []extv1beta1.EnvVar{{Name: "A", Value: "1"}}
		}},
		"metadata": {pool: "pool", reason: extv1beta1.ClaimReasonInvalidMetadata, edit: func(c *extv1beta1.SandboxClaim) {
			c.Spec.AdditionalPodMetadata.Labels = map[string]string{"team": "a"}
		}},
	}
	for name, c := range cases {
		w.claim(name, c.pool, c.edit)
	}
	for name, c := range cases {
		w.waitReason(name, c.reason, "")
		exttest.Eventually(t, wait, func() error {
			n, err := occurrences(w, name, c.reason)
			if err == nil && n != 1 {
				err = fmt.Errorf("claim %s: %d %s events, want 1", name, n, c.reason)
			}
			return err
		})
	}
	for i := 0; i < 3; i++ {
		for name := range cases {
			if err := w.c.Patch(context.Background(), w.getClaim(name), rawPatch(fmt.Sprintf(`{"metadata":{"labels":{"poke":"%d"}}}`, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	exttest.Consistently(t, 2*time.Second, func() error {
		for name, c := range cases {
			if n, err := occurrences(w, name, c.reason); err != nil || n != 1 {
				return fmt.Errorf("claim %s: %d %s events after more reconciles (%v), want still 1", name, n, c.reason, err)
			}
		}
		return nil
	})
}
