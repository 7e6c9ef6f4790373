package claim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/claim"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

func podEnv(p *corev1.Pod, name string) (string, bool) {
	for _, e := range p.Spec.Containers[0].Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

// onlyMember returns the pool's one free member once it has an address.
func (w *lbWorld) onlyMember(pool string) *sandboxv1beta1.Sandbox {
	w.t.Helper()
	var sb *sandboxv1beta1.Sandbox
	exttest.Eventually(w.t, wait, func() error {
		ms, err := exttest.PoolMembers(w.c, w.ns, pool)
		if err != nil || len(ms) != 1 || len(ms[0].Status.PodIPs) == 0 {
			return fmt.Errorf("members of %s: %d (%v)", pool, len(ms), err)
		}
		sb = &ms[0]
		return nil
	})
	return sb
}

// waitProbed waits until the liar at ip answered the controller's probe.
func (w *lbWorld) waitProbed(ip string) {
	w.t.Helper()
	exttest.Eventually(w.t, wait, func() error {
		if gets, _ := w.fakes.counts(ip); gets == 0 {
			return errors.New("not probed yet")
		}
		return nil
	})
}

// The defect of branch s4-latebind2: a template that allows env gets the
// key injected into its first container whether or not that container
// runs sandboxd; an env claim adopted such a member and waited forever in
// EnvDeliveryPending. Now the member never answered the probe, so the
// claim cold-starts with the env in its Pod spec (the published
// behaviour), says why, and the member stays in the pool.
func TestLateBindingUnprovenMemberColdStarts(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.readyPool("nosd", 1, withFake(fakeNone, allowEnv))
	member := w.onlyMember("nosd")
	if got := keyEnvOf(&member.Spec.PodTemplate.Spec.Containers[0]); len(got) != 1 {
		t.Fatalf("member carries %s = %v; the test needs the injected key", "the key", got)
	}
	w.claim("c1", "nosd", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("API_KEY", "k-cold") })
	sb := w.waitReady("c1")
	if sb.Name != "c1" || sb.Labels[labels.LaunchType] != labels.LaunchTypeCold {
		t.Fatalf("got %s (%s), want a cold sandbox", sb.Name, sb.Labels[labels.LaunchType])
	}
	if v, ok := podEnv(w.pod(sb.Name), "API_KEY"); !ok || v != "k-cold" {
		t.Fatalf("cold Pod spec API_KEY = %q (%v), want the claim's env", v, ok)
	}
	cond := findCond(w.getClaim("c1"), extv1beta1.ClaimConditionLateBinding)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != extv1beta1.ClaimReasonLateBindingUnavailable ||
		!strings.Contains(cond.Message, "has shown sandboxd with this controller's key") {
		t.Fatalf("LateBinding condition = %+v", cond)
	}
	exttest.Eventually(t, wait, func() error {
		return (eventsList{}).expect(w.world, "SandboxClaim", "c1", extv1beta1.ClaimReasonLateBindingUnavailable)
	})
	ms, err := exttest.PoolMembers(w.c, w.ns, "nosd")
	if err != nil || len(ms) != 1 || ms[0].UID != member.UID || ms[0].Labels[labels.ClaimUID] != "" {
		t.Fatalf("pool members %v (%v), want the untouched member %s", ms, err, member.Name)
	}
	// A claim without env still takes it warm.
	w.claim("plain", "nosd", nil)
	if got := w.waitReady("plain"); got.UID != member.UID {
		t.Fatalf("plain claim got %s, want the warm member", got.Name)
	}
}

// The probe is a read: it never adopts, labels or patches the member,
// never writes a claim, and never posts a delivery.
func TestLateBindingProbeNeverWrites(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.writes.Reset()
	w.readyPool("liar", 1, withFake(fakeLiar, allowEnv))
	member := w.onlyMember("liar")
	w.waitProbed(member.Status.PodIPs[0])
	for _, x := range w.writes.Writes() {
		if (x.Resource == "sandboxes" && x.Name == member.Name && x.Verb == "patch") || strings.HasPrefix(x.Resource, "sandboxclaims") {
			t.Errorf("write during the probe: %+v", x)
		}
	}
	if got := w.mustSandbox(member.Name); got.Labels[labels.ClaimUID] != "" || got.Labels[labels.WarmPoolSandbox] == "" {
		t.Fatalf("probed member changed: %v", got.Labels)
	}
	if _, posts := w.fakes.counts(member.Status.PodIPs[0]); posts != 0 {
		t.Fatalf("the probe posted %d times", posts)
	}
}

// A member that passes the probe but never takes the delivery (a sandboxd
// that crashed for good, or a liar): the claim does not hang. After the
// delivery deadline it deletes that Sandbox (by UID), starts cold with the
// env in the Pod spec, and says so with a condition and a Warning event.
func TestLateBindingDeliveryDeadlineGoesCold(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{DeliveryDeadline: 2 * time.Second})
	w.readyPool("liar", 1, withFake(fakeLiar, allowEnv))
	member := w.onlyMember("liar")
	w.waitProbed(member.Status.PodIPs[0])
	w.claim("c1", "liar", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("API_KEY", "k-late") })
	w.waitReason("c1", extv1beta1.ClaimReasonEnvDeliveryPending, "")
	if name := w.getClaim("c1").Status.SandboxStatus.Name; name != member.Name {
		t.Fatalf("claim bound to %q, want the probed member %s adopted warm first", name, member.Name)
	}
	sb := w.waitReady("c1")
	if sb.Name != "c1" || sb.Labels[labels.LaunchType] != labels.LaunchTypeCold {
		t.Fatalf("after the deadline got %s (%s), want a cold sandbox", sb.Name, sb.Labels[labels.LaunchType])
	}
	if v, _ := podEnv(w.pod("c1"), "API_KEY"); v != "k-late" {
		t.Fatalf("cold Pod spec API_KEY = %q", v)
	}
	if _, posts := w.fakes.counts(member.Status.PodIPs[0]); posts == 0 {
		t.Fatal("no delivery was attempted; the test proves nothing")
	}
	cond := findCond(w.getClaim("c1"), extv1beta1.ClaimConditionLateBinding)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != extv1beta1.ClaimReasonEnvDeliveryFailed {
		t.Fatalf("LateBinding condition = %+v", cond)
	}
	exttest.Eventually(t, wait, func() error {
		return (eventsList{}).expect(w.world, "SandboxClaim", "c1", extv1beta1.ClaimReasonEnvDeliveryFailed)
	})
	// Nothing leaked: the adopted member is gone, the claim controls one
	// Sandbox.
	exttest.Eventually(t, wait, func() error {
		got, err := w.sandbox(member.Name)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err != nil:
			return err
		case got.UID != member.UID:
			return nil // the pool reused the name for a new member
		}
		return fmt.Errorf("released member %s still there", member.Name)
	})
	var list sandboxv1beta1.SandboxList
	if err := w.c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range list.Items {
		if list.Items[i].Namespace == w.ns && metav1.IsControlledBy(&list.Items[i], w.getClaim("c1")) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("claim controls %d sandboxes, want 1", n)
	}
}

// The attack: a Sandbox planted with a pool member's labels and an owner
// reference naming the pool, but not the live pool's UID, whose
// "sandboxd" answers the probe with the controller's key ID. The probe
// may say yes; vetting still refuses it by UID, so the env claim never
// adopts it.
func TestLateBindingProbedImpostorNeverCandidate(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.readyPool("pool", 1, withFake(fakeNone, allowEnv))
	genuine := w.onlyMember("pool")
	planted := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "planted", Labels: map[string]string{}}}
	for k, v := range genuine.Labels {
		planted.Labels[k] = v
	}
	planted.OwnerReferences = []metav1.OwnerReference{{APIVersion: extv1beta1.GroupVersion.String(), Kind: "SandboxWarmPool",
		Name: "pool", UID: types.UID("00000000-0000-0000-0000-0000000000aa"), Controller: ptr.To(true)}}
	genuine.Spec.DeepCopyInto(&planted.Spec)
	env := planted.Spec.PodTemplate.Spec.Containers[0].Env
	for i := range env {
		if env[i].Name == fakeEnv {
			env[i].Value = fakeLiar
		}
	}
	exttest.Create(t, w.c, planted)
	var ip string
	exttest.Eventually(t, wait, func() error {
		sb, err := w.sandbox("planted")
		if err != nil || len(sb.Status.PodIPs) == 0 {
			return fmt.Errorf("planted has no IP yet (%v)", err)
		}
		ip = sb.Status.PodIPs[0]
		return nil
	})
	w.waitProbed(ip)

	w.claim("victim", "pool", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("API_KEY", "victim-secret") })
	sb := w.waitReady("victim")
	if sb.UID == planted.UID || sb.Name != "victim" {
		t.Fatalf("the victim got %s, want a cold sandbox", sb.Name)
	}
	if got, err := w.sandbox("planted"); err == nil && (got.Labels[labels.ClaimUID] != "" || metav1.IsControlledBy(got, w.getClaim("victim"))) {
		t.Fatal("the planted Sandbox was adopted")
	}
	if _, posts := w.fakes.counts(ip); posts != 0 {
		t.Fatalf("the victim's env was posted to the impostor %d times", posts)
	}
}

// Verdicts live in memory only: a new controller re-derives them from the
// informer's initial list, so after a restart an env claim is still served
// warm by a member that was Ready all along (no new event for it).
func TestLateBindingVerdictsAfterRestart(t *testing.T) {
	w := newLBWorld(t, claim.LateBinding{})
	w.readyPool("pool", 1, allowEnv)
	member := w.onlyMember("pool")
	w.restart(claim.LateBinding{})
	w.claim("c1", "pool", func(c *extv1beta1.SandboxClaim) { c.Spec.Env = envOf("API_KEY", "after-restart") })
	sb := w.waitReady("c1")
	if sb.UID != member.UID {
		t.Fatalf("after a restart the env claim got %s, want the warm member %s", sb.Name, member.Name)
	}
	if got := w.run(sb, "printenv API_KEY"); got != "after-restart\n" {
		t.Fatalf("API_KEY = %q", got)
	}
}
