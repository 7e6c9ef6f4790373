package claim_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest/harness"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
	"sigs.k8s.io/agent-sandbox/internal/controller/sandbox"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

func TestColdCreateFromPoolTemplate(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("empty", 0, nil) // replicas 0: a cold-start-only template
	claim := w.claim("c1", "empty", func(c *extv1beta1.SandboxClaim) {
		c.Labels = map[string]string{labels.CreatedBy: "python-client"}
	})
	sb := w.waitReady("c1")
	if sb.Name != "c1" {
		t.Fatalf("cold sandbox named %q, want the claim's name", sb.Name)
	}
	if !metav1.IsControlledBy(sb, claim) {
		t.Errorf("sandbox owners = %+v", sb.OwnerReferences)
	}
	want := map[string]string{
		labels.ClaimUID: string(claim.UID), labels.LaunchType: "cold", labels.CreatedBy: "python-client",
		labels.SandboxTemplateRefHash: labels.NameHash("empty-tmpl"),
	}
	for k, v := range want {
		if sb.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, sb.Labels[k], v)
		}
	}
	if sb.Annotations[labels.SandboxTemplateRef] != "empty-tmpl" {
		t.Errorf("annotations = %v", sb.Annotations)
	}
	ps := sb.Spec.PodTemplate.Spec
	if ps.DNSPolicy != corev1.DNSNone || ps.DNSConfig == nil || ps.DNSConfig.Nameservers[0] != "8.8.8.8" || !ptr.Equal(ps.AutomountServiceAccountToken, ptr.To(false)) {
		t.Errorf("secure defaults missing: %+v", ps)
	}
	got := w.getClaim("c1")
	if got.Status.SandboxStatus.Name != "c1" || len(got.Status.SandboxStatus.PodIPs) == 0 || got.Status.SandboxStatus.PodIPs[0] != sb.Status.PodIPs[0] {
		t.Errorf("claim status = %+v", got.Status)
	}
	// The claim never makes a NetworkPolicy of its own.
	var np networkingv1.NetworkPolicy
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: "c1-network-policy"}, &np); !apierrors.IsNotFound(err) {
		t.Errorf("claim NetworkPolicy: %v", err)
	}
}

func TestColdKeepsExplicitAutomount(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("p", 0, func(tm *extv1beta1.SandboxTemplate) {
		tm.Spec.PodTemplate.Spec.AutomountServiceAccountToken = ptr.To(true)
	})
	w.claim("c1", "p", nil)
	if sb := w.waitReady("c1"); !ptr.Deref(sb.Spec.PodTemplate.Spec.AutomountServiceAccountToken, false) {
		t.Fatal("explicit automountServiceAccountToken: true not preserved")
	}
}

func TestWarmAdoption(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 2, nil)
	for _, m := range w.sandboxes() {
		if got := w.pod(m.Name).Annotations[labels.SafeToEvict]; got != "true" {
			t.Errorf("warm pod %s: safe-to-evict = %q, want \"true\"", m.Name, got)
		}
	}
	w.writes.Reset()
	claim := w.claim("c1", "pool", nil)
	sb := w.waitReady("c1")
	if sb.Name == "c1" || !strings.HasPrefix(sb.Name, "pool-") {
		t.Fatalf("claim got %q, want a pool sandbox", sb.Name)
	}
	if !metav1.IsControlledBy(sb, claim) || len(sb.OwnerReferences) != 1 {
		t.Errorf("owners = %+v", sb.OwnerReferences)
	}
	if _, ok := sb.Labels[labels.WarmPoolSandbox]; ok || sb.Labels[labels.LaunchType] != "warm" || sb.Labels[labels.ClaimUID] != string(claim.UID) {
		t.Errorf("labels = %v", sb.Labels)
	}
	if sb.Annotations[labels.PodName] != sb.Name {
		t.Errorf("pod-name annotation = %q", sb.Annotations[labels.PodName])
	}
	exttest.Eventually(t, wait, func() error {
		p := w.pod(sb.Name)
		if _, ok := p.Labels[labels.WarmPoolSandbox]; ok {
			return errorf("pod still carries the pool label")
		}
		if _, ok := p.Annotations[labels.SafeToEvict]; ok {
			return errorf("claimed pod is still safe to evict")
		}
		return nil
	})
	exttest.Eventually(t, wait, func() error { return exttest.PoolReady(w.c, w.ns, "pool", 2) })

	// The claim path of the extension controllers: one Sandbox patch and
	// one claim status write, nothing else (no events, no annotations).
	var adoption, claimWrites, other []exttest.Write
	for _, x := range w.writes.Writes() {
		switch {
		case x.Resource == "sandboxes" && x.Name == sb.Name && x.Verb == "patch":
			adoption = append(adoption, x)
		case strings.HasPrefix(x.Resource, "sandboxclaims"), x.Resource == "events":
			claimWrites = append(claimWrites, x)
		case x.Name == sb.Name:
			other = append(other, x)
		}
	}
	if len(adoption) != 1 || len(claimWrites) != 1 || claimWrites[0].Resource != "sandboxclaims/status" {
		t.Errorf("claim path writes: adoption %v, claim %v", adoption, claimWrites)
	}
	// The Sandbox controller's share: one Pod relabel (pool label and
	// safe-to-evict out). The same reconcile would write the Sandbox status
	// right after it if adoption had bumped the generation; give it time.
	time.Sleep(500 * time.Millisecond)
	other = other[:0]
	for _, x := range w.writes.Writes() {
		if x.Name == sb.Name && x.Resource != "sandboxes" && !strings.HasPrefix(x.Resource, "sandboxclaims") && x.Resource != "events" ||
			x.Resource == "sandboxes/status" && x.Name == sb.Name {
			other = append(other, x)
		}
	}
	if len(other) != 1 || other[0].Resource != "pods" || other[0].Verb != "patch" {
		t.Errorf("Sandbox controller writes for the adopted sandbox: %s, want one Pod patch", exttest.Summary(other))
	}
	if got := w.mustSandbox(sb.Name); got.Generation != 1 {
		t.Errorf("adoption bumped the generation to %d", got.Generation)
	}
	if _, ok := w.mustSandbox(sb.Name).Annotations[labels.SafeToEvict]; ok {
		t.Error("the claimed Sandbox still carries the pool's safe-to-evict mark")
	}
}

// The adoption patch resets the field ownership the pool's create recorded,
// and the apiserver then records none for later updates of the claimed
// Sandbox (a plain update, a status write): they skip the ownership diff.
// Fails if the reset is left out of the patch.
func TestAdoptionDropsFieldOwnership(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 1, nil)
	if m := w.sandboxes(); len(m) != 1 || len(m[0].ManagedFields) == 0 {
		t.Fatalf("pool member without recorded field ownership before the claim: %+v", m)
	}
	w.claim("c1", "pool", nil)
	sb := w.waitReady("c1")
	if len(sb.ManagedFields) != 0 {
		t.Fatalf("claimed Sandbox still records field ownership: %+v", sb.ManagedFields)
	}
	ctx := context.Background()
	if err := w.c.Patch(ctx, sb, rawPatch(`{"metadata":{"labels":{"team":"a"}}}`)); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Status().Patch(ctx, sb, rawPatch(`{"status":{"nodeName":"elsewhere"}}`)); err != nil {
		t.Fatal(err)
	}
	if got := w.mustSandbox(sb.Name); got.Labels["team"] != "a" || len(got.ManagedFields) != 0 {
		t.Errorf("after an update and a status write: labels %v, managedFields %+v", got.Labels, got.ManagedFields)
	}
}

func TestMissingPoolThenTemplateRecover(t *testing.T) {
	w := newWorld(t, defaults())
	errsBefore := reconcileErrors(t)
	w.claim("c1", "late", nil)
	w.waitReason("c1", extv1beta1.ClaimReasonWarmPoolNotFound, `SandboxWarmPool "late" not found`)
	exttest.Create(t, w.c, exttest.NewPool(w.ns, "late", "late-tmpl", 0))
	w.waitReason("c1", extv1beta1.ClaimReasonTemplateNotFound, `SandboxTemplate "late-tmpl" not found`)
	if got := reconcileErrors(t); got != errsBefore {
		t.Errorf("missing references caused %v reconcile errors (backoff loops)", got-errsBefore)
	}
	// Creating the template wakes the claim at once (the fallback timer is
	// a minute; the test's wait is shorter).
	exttest.Create(t, w.c, exttest.NewTemplate(w.ns, "late-tmpl"))
	w.waitReady("c1")
}

func TestTemplateDeletedUnderLivePool(t *testing.T) {
	w := newWorld(t, defaults())
	tmpl := w.readyPool("pool", 1, nil)
	if err := w.c.Delete(context.Background(), tmpl); err != nil {
		t.Fatal(err)
	}
	// Warm members still serve claims; cold ones report the template.
	w.claim("warm", "pool", nil)
	if sb := w.waitReady("warm"); sb.Name == "warm" {
		t.Fatal("a Ready warm member was not used")
	}
	w.claim("cold", "pool", func(c *extv1beta1.SandboxClaim) {
		c.Spec.Env = []extv1beta1.EnvVar{{Name: "A", Value: "1"}}
	})
	w.waitReason("cold", extv1beta1.ClaimReasonTemplateNotFound, `SandboxTemplate "pool-tmpl" not found`)
	exttest.Eventually(t, wait, func() error {
		var evs eventsList
		return evs.expect(w, "SandboxWarmPool", "pool", "TemplateNotFound")
	})
}

func TestNameClashIsReported(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("empty", 0, nil)
	foreign := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "mine"}}
	foreign.Spec.PodTemplate.Spec.Containers = []corev1.Container{{Name: "x", Image: exttest.PauseImage}}
	exttest.Create(t, w.c, foreign)
	w.claim("mine", "empty", nil)
	w.waitReason("mine", extv1beta1.ClaimReasonReconcilerError,
		`Error seen: sandbox "mine" is not controlled by claim "mine". Please use a different claim name or delete the sandbox manually`)
	if sb := w.mustSandbox("mine"); len(sb.OwnerReferences) != 0 {
		t.Fatal("the foreign sandbox was taken over")
	}
}

func TestInvalidMetadataRefused(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 1, nil)
	w.claim("bad", "pool", func(c *extv1beta1.SandboxClaim) {
		c.Spec.AdditionalPodMetadata.Labels = map[string]string{"app": "sandbox-router"}
	})
	w.waitReason("bad", extv1beta1.ClaimReasonInvalidMetadata, `invalid additionalPodMetadata: failed to validate label "app": restricted system label value: "app"="sandbox-router" is not allowed in AdditionalPodMetadata`)
	if got := w.getClaim("bad").Status.SandboxStatus.Name; got != "" {
		t.Fatalf("a sandbox was bound: %s", got)
	}
	if ms, _ := exttest.PoolMembers(w.c, w.ns, "pool"); len(ms) != 1 || index.ControllerClaimUID(&ms[0]) != "" {
		t.Fatal("the pool member was touched")
	}
}

func TestAdditionalPodMetadataPropagatesWithoutRestart(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 1, func(tm *extv1beta1.SandboxTemplate) {
		tm.Spec.PodTemplate.ObjectMeta.Labels = map[string]string{"team": "a"}
	})
	w.claim("c1", "pool", func(c *extv1beta1.SandboxClaim) {
		c.Spec.AdditionalPodMetadata.Labels = map[string]string{"sandbox.users.io/user": "alice"}
	})
	sb := w.waitReady("c1")
	var podUID types.UID
	exttest.Eventually(t, wait, func() error {
		p := w.pod(sb.Name)
		podUID = p.UID
		if p.Labels["sandbox.users.io/user"] != "alice" || p.Labels["team"] != "a" {
			return errorf("pod labels %v", p.Labels)
		}
		return nil
	})
	claim := w.getClaim("c1")
	claim.Spec.AdditionalPodMetadata.Labels["sandbox.users.io/user"] = "bob"
	if err := w.c.Update(context.Background(), claim); err != nil {
		t.Fatal(err)
	}
	exttest.Eventually(t, wait, func() error {
		p := w.pod(sb.Name)
		if p.Labels["sandbox.users.io/user"] != "bob" {
			return errorf("pod labels %v", p.Labels)
		}
		if p.UID != podUID {
			t.Fatal("the pod was recreated to change its labels")
		}
		return nil
	})
}

func TestEnvForcesColdStart(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 1, func(tm *extv1beta1.SandboxTemplate) {
		tm.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
	})
	w.claim("c1", "pool", func(c *extv1beta1.SandboxClaim) {
		c.Spec.Env = []extv1beta1.EnvVar{{Name: "API_KEY", Value: "k"}}
	})
	sb := w.waitReady("c1")
	if sb.Name != "c1" || sb.Labels[labels.LaunchType] != "cold" {
		t.Fatalf("claim with env got %s (%s), want a cold sandbox", sb.Name, sb.Labels[labels.LaunchType])
	}
	env := sb.Spec.PodTemplate.Spec.Containers[0].Env
	if len(env) != 1 || env[0].Name != "API_KEY" || env[0].Value != "k" {
		t.Fatalf("env = %+v", env)
	}
	if ms, _ := exttest.PoolMembers(w.c, w.ns, "pool"); len(ms) != 1 || index.ControllerClaimUID(&ms[0]) != "" {
		t.Fatal("the warm member was used although the claim sets env")
	}
}

func TestEnvRejectedByPolicy(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 0, nil) // envVarsInjectionPolicy defaults to Disallowed
	w.claim("c1", "pool", func(c *extv1beta1.SandboxClaim) {
		c.Spec.Env = []extv1beta1.EnvVar{{Name: "LD_PRELOAD", Value: "/tmp/evil.so"}}
	})
	w.waitReason("c1", extv1beta1.ClaimReasonEnvVarsInjectionRejected,
		"environment variable injection rejected: environment variable injection is not allowed by the template policy")
	if _, err := w.sandbox("c1"); !apierrors.IsNotFound(err) {
		t.Fatalf("a sandbox was created: %v", err)
	}
}

func errorf(format string, args ...any) error { return &testErr{msg: sprintf(format, args...)} }

// Success events are off by default (each is a write on the hot path) and
// available on request; failure events are always on.
func TestSuccessEventsOptIn(t *testing.T) {
	opts := defaults()
	opts.ClaimSuccessEvents = true
	w := newWorld(t, opts)
	w.readyPool("pool", 1, func(tmpl *extv1beta1.SandboxTemplate) {
		tmpl.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
	})
	w.claim("warm", "pool", nil)
	w.waitReady("warm")
	// A claim that sets env always goes cold (canGoWarm), so its Sandbox is
	// provisioned, never adopted, whatever the refill is doing.
	w.claim("cold", "pool", func(c *extv1beta1.SandboxClaim) {
		c.Spec.Env = []extv1beta1.EnvVar{{Name: "COLD", Value: "1"}}
	})
	w.waitReady("cold")
	exttest.Eventually(t, wait, func() error { return (eventsList{}).expect(w, "SandboxClaim", "warm", "SandboxAdopted") })
	exttest.Eventually(t, wait, func() error { return (eventsList{}).expect(w, "SandboxClaim", "cold", "SandboxProvisioned") })
}

func TestNoSuccessEventsByDefault(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 1, nil)
	w.claim("warm", "pool", nil)
	w.waitReady("warm")
	exttest.Consistently(t, time.Second, func() error {
		if (eventsList{}).expect(w, "SandboxClaim", "warm", "SandboxAdopted") == nil {
			t.Fatal("SandboxAdopted emitted without ClaimSuccessEvents")
		}
		return nil
	})
}

// With --sandbox-write-behind-window the Pod relabel after an adoption is
// held back (never past 1 s) and then written once: the claim is Ready
// without it, and nothing is lost.
func TestWarmAdoptionWriteBehind(t *testing.T) {
	const window = 600 * time.Millisecond
	w := newWorldWith(t, harness.ManagerOptions{Extensions: defaults(),
		Sandbox: &sandbox.Options{Workers: 100, StatusCoalesceWindow: time.Second, WriteBehindWindow: window}})
	w.readyPool("pool", 1, nil)
	w.writes.Reset()
	w.claim("c1", "pool", nil)
	sb := w.waitReady("c1")
	readyAt := time.Now()
	relabelled := func() error {
		p := w.pod(sb.Name)
		if _, ok := p.Labels[labels.WarmPoolSandbox]; ok {
			return errorf("pod still carries the pool label")
		}
		if _, ok := p.Annotations[labels.SafeToEvict]; ok {
			return errorf("claimed pod is still safe to evict")
		}
		return nil
	}
	if err := relabelled(); err == nil {
		t.Errorf("the Pod was relabelled before the claim was seen Ready; the patch was not held back")
	}
	exttest.Eventually(t, wait, relabelled)
	if took := time.Since(readyAt); took > 2*podMetadataFlushBound {
		t.Errorf("relabel landed %s after the claim was Ready; the bound is 1s", took)
	}
	time.Sleep(300 * time.Millisecond)
	if n := w.writes.Count("patch", "pods"); n != 1 {
		t.Errorf("%d Pod patches for the adopted sandbox, want 1: %s", n, w.writes.String())
	}
}

// podMetadataFlushBound mirrors the Sandbox controller's cap on the window.
const podMetadataFlushBound = time.Second
