package claim_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/index"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// poison creates a Ready Sandbox (with a pod IP) that looks like a member
// of pool in ns, edited by edit, and returns it.
func poison(w *world, ns, name, pool string, edit func(*sandboxv1beta1.Sandbox)) *sandboxv1beta1.Sandbox {
	w.t.Helper()
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
		labels.WarmPoolSandbox: labels.NameHash(pool), labels.SandboxTemplateRefHash: labels.NameHash(pool + "-tmpl"),
	}}}
	sb.Spec.PodTemplate.Spec.Containers = []corev1.Container{{Name: "main", Image: "attacker/backdoor:latest"}}
	edit(sb)
	exttest.Create(w.t, w.c, sb)
	if err := exttest.MarkSandboxReady(context.Background(), w.c, sb, "10.66.6.6"); err != nil {
		w.t.Fatal(err)
	}
	return sb
}

// TestPoisonedCandidatesNeverAdopted plants Sandboxes crafted to look like
// warm members of the victim's pool: unowned with the pool labels,
// controlled by another kind, controlled by a same-named pool in another
// namespace, and one being deleted. None may ever be handed to a claim.
func TestPoisonedCandidatesNeverAdopted(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 0, nil)
	other := exttest.Namespace(t, w.c, "attacker")
	exttest.Create(t, w.c, exttest.NewTemplate(other, "pool-tmpl"))
	attackerPool := exttest.NewPool(other, "pool", "pool-tmpl", 0)
	exttest.Create(t, w.c, attackerPool)
	victimPool := &extv1beta1.SandboxWarmPool{}
	if err := w.c.Get(context.Background(), clientKey(w.ns, "pool"), victimPool); err != nil {
		t.Fatal(err)
	}

	poisoned := []*sandboxv1beta1.Sandbox{
		poison(w, w.ns, "unowned", "pool", func(*sandboxv1beta1.Sandbox) {}),
		poison(w, w.ns, "other-kind", "pool", func(sb *sandboxv1beta1.Sandbox) {
			sb.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "pool", UID: victimPool.UID, Controller: ptr.To(true)}}
		}),
		poison(w, other, "cross-ns", "pool", func(sb *sandboxv1beta1.Sandbox) {
			sb.OwnerReferences = []metav1.OwnerReference{{APIVersion: "extensions.agents.x-k8s.io/v1beta1", Kind: "SandboxWarmPool",
				Name: "pool", UID: attackerPool.UID, Controller: ptr.To(true)}}
		}),
		poison(w, w.ns, "deleting", "pool", func(sb *sandboxv1beta1.Sandbox) {
			sb.Finalizers = []string{"test.agents.x-k8s.io/hold"}
			sb.OwnerReferences = []metav1.OwnerReference{{APIVersion: "extensions.agents.x-k8s.io/v1beta1", Kind: "SandboxWarmPool",
				Name: "pool", UID: victimPool.UID, Controller: ptr.To(true)}}
		}),
	}
	if err := w.c.Delete(context.Background(), poisoned[3]); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		w.claim(fmt.Sprintf("c%d", i), "pool", nil)
	}
	for i := 0; i < 3; i++ {
		if sb := w.waitReady(fmt.Sprintf("c%d", i)); sb.Name != fmt.Sprintf("c%d", i) {
			t.Errorf("claim c%d got %s, want its own cold sandbox", i, sb.Name)
		}
	}
	for _, p := range poisoned {
		var got sandboxv1beta1.Sandbox
		if err := w.c.Get(context.Background(), clientKey(p.Namespace, p.Name), &got); err != nil {
			if apierrors.IsNotFound(err) {
				continue // the victim pool may delete a forged orphan; it is never handed out
			}
			t.Fatal(err)
		}
		if index.ControllerClaimUID(&got) != "" {
			t.Errorf("poisoned sandbox %s/%s was adopted", p.Namespace, p.Name)
		}
	}
	_ = w.c.Patch(context.Background(), poisoned[3], rawPatch(`{"metadata":{"finalizers":null}}`))
}

// Claims may not label their pods as the sandbox-router (which the secure
// NetworkPolicy admits) or under system domains.
func TestClaimMetadataSpoofingRefused(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 0, nil)
	cases := map[string]func(*extv1beta1.SandboxClaim){
		"router": func(c *extv1beta1.SandboxClaim) {
			c.Spec.AdditionalPodMetadata.Labels = map[string]string{"app": "sandbox-router"}
		},
		"hash": func(c *extv1beta1.SandboxClaim) {
			c.Spec.AdditionalPodMetadata.Labels = map[string]string{labels.SandboxNameHash: labels.NameHash("victim")}
		},
		"domain": func(c *extv1beta1.SandboxClaim) {
			c.Spec.AdditionalPodMetadata.Labels = map[string]string{"example.com/team": "x"}
		},
		"kubelet-annotation": func(c *extv1beta1.SandboxClaim) {
			c.Spec.AdditionalPodMetadata.Annotations = map[string]string{"kubernetes.io/config.mirror": "x"}
		},
	}
	for name, edit := range cases {
		w.claim(name, "pool", edit)
	}
	for name := range cases {
		w.waitReason(name, extv1beta1.ClaimReasonInvalidMetadata, "")
		if _, err := w.sandbox(name); !apierrors.IsNotFound(err) {
			t.Errorf("%s: a sandbox was created (%v)", name, err)
		}
	}
}

func TestClaimVolumeClaimTemplates(t *testing.T) {
	w := newWorld(t, defaults())
	vct := func(name, size string) sandboxv1beta1.PersistentVolumeClaimTemplate {
		return sandboxv1beta1.PersistentVolumeClaimTemplate{
			EmbeddedObjectMetadata: sandboxv1beta1.EmbeddedObjectMetadata{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			},
		}
	}
	withVCT := func(policy extv1beta1.VolumeClaimTemplatesPolicy) func(*extv1beta1.SandboxTemplate) {
		return func(tm *extv1beta1.SandboxTemplate) {
			tm.Spec.VolumeClaimTemplatesPolicy = policy
			tm.Spec.VolumeClaimTemplates = []sandboxv1beta1.PersistentVolumeClaimTemplate{vct("workspace", "1Gi")}
		}
	}
	w.readyPool("over", 0, withVCT(extv1beta1.VolumeClaimTemplatesPolicyOverrides))
	w.readyPool("deny", 1, withVCT(extv1beta1.VolumeClaimTemplatesPolicyDisallowed))

	w.claim("resize", "over", func(c *extv1beta1.SandboxClaim) {
		c.Spec.VolumeClaimTemplates = []sandboxv1beta1.PersistentVolumeClaimTemplate{vct("workspace", "3Gi")}
	})
	w.claim("refused", "deny", func(c *extv1beta1.SandboxClaim) {
		c.Spec.VolumeClaimTemplates = []sandboxv1beta1.PersistentVolumeClaimTemplate{vct("data", "1Gi")}
	})
	w.claim("plain", "deny", nil)

	w.waitReason("refused", extv1beta1.ClaimReasonVolumeClaimTemplatesError, "volume claim templates are disallowed by the template")
	if sb := w.waitReady("plain"); sb.Name == "plain" {
		t.Error("a claim without VCTs must still be served warm under a Disallowed policy")
	}
	exttest.Eventually(t, wait, func() error {
		var pvc corev1.PersistentVolumeClaim
		if err := w.c.Get(context.Background(), clientKey(w.ns, "workspace-resize"), &pvc); err != nil {
			return err
		}
		if q := pvc.Spec.Resources.Requests[corev1.ResourceStorage]; q.String() != "3Gi" {
			return fmt.Errorf("PVC size %s", q.String())
		}
		return nil
	})
	if sb := w.mustSandbox("resize"); sb.Labels[labels.LaunchType] != "cold" {
		t.Errorf("claim with VCTs launched %q", sb.Labels[labels.LaunchType])
	}
}

// Two Ready warm sandboxes, three claims at once: every sandbox has at most
// one claim, every claim exactly one sandbox.
func TestExclusivityTwoSandboxesThreeClaims(t *testing.T) {
	opts := defaults()
	// A pool holding its refills back: the third claim does not wait for
	// a replacement (waitline.go) but races the other two and goes cold.
	opts.ReplenishDelay = time.Hour
	w := newWorld(t, opts)
	w.readyPool("pool", 2, nil)
	w.gate.Close() // refills stay unready: exactly two warm candidates
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			exttest.Create(t, w.c, exttest.NewClaim(w.ns, fmt.Sprintf("c%d", i), "pool"))
		}()
	}
	wg.Wait()
	exttest.Eventually(t, wait, func() error {
		for i := 0; i < 3; i++ {
			if w.getClaim(fmt.Sprintf("c%d", i)).Status.SandboxStatus.Name == "" {
				return fmt.Errorf("c%d unbound", i)
			}
		}
		return nil
	})
	owners := map[string]int{}
	for _, sb := range w.sandboxes() {
		if uid := index.ControllerClaimUID(&sb); uid != "" {
			owners[uid]++
		}
	}
	warm := 0
	for i := 0; i < 3; i++ {
		c := w.getClaim(fmt.Sprintf("c%d", i))
		if owners[string(c.UID)] != 1 {
			t.Errorf("claim %s controls %d sandboxes", c.Name, owners[string(c.UID)])
		}
		if c.Status.SandboxStatus.Name != c.Name {
			warm++
		}
	}
	if warm != 2 {
		t.Errorf("%d warm adoptions, want 2", warm)
	}
	_ = w.gate.Open(context.Background(), w.c, w.ns)
}

// A claim written by the published controller names its sandbox in an
// annotation; a half-done adoption is finished, a stale name is dropped.
func TestLegacyAssignmentHonoured(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("pool", 2, nil)
	ms, _ := exttest.PoolMembers(w.c, w.ns, "pool")
	chosen := ms[1].Name
	w.claim("legacy", "pool", func(c *extv1beta1.SandboxClaim) {
		c.Annotations = map[string]string{labels.SandboxName: chosen}
	})
	if sb := w.waitReady("legacy"); sb.Name != chosen {
		t.Fatalf("legacy claim got %s, want its recorded %s", sb.Name, chosen)
	}
	w.claim("stale", "pool", func(c *extv1beta1.SandboxClaim) {
		c.Labels = map[string]string{labels.SandboxName: "gone"}
	})
	w.waitReady("stale")
	if _, ok := w.getClaim("stale").Labels[labels.SandboxName]; ok {
		t.Error("stale legacy label not removed")
	}
}

func TestLegacyClaimNetworkPolicyCleanup(t *testing.T) {
	w := newWorld(t, defaults())
	w.readyPool("empty", 0, nil)
	// The claim's UID is only known after creation; create the claim with
	// a pool that does not exist yet so nothing happens until we are ready.
	claim := w.claim("owned", "later", nil)
	foreignClaim := w.claim("foreign", "later", nil)
	mkNP := func(name string, owner *extv1beta1.SandboxClaim) {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name + "-network-policy"}}
		if owner != nil {
			np.OwnerReferences = []metav1.OwnerReference{{APIVersion: "extensions.agents.x-k8s.io/v1beta1", Kind: "SandboxClaim",
				Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
		}
		exttest.Create(t, w.c, np)
	}
	mkNP("owned", claim)
	mkNP("foreign", nil)
	_ = foreignClaim
	// The controller looks once per claim per process: restart it so the
	// policies, created after the first passes, are seen.
	w.mgr.Stop()
	newWorldOn(w)
	exttest.Eventually(t, wait, func() error {
		var np networkingv1.NetworkPolicy
		if err := w.c.Get(context.Background(), clientKey(w.ns, "owned-network-policy"), &np); !apierrors.IsNotFound(err) {
			return fmt.Errorf("owned legacy policy not deleted: %v", err)
		}
		return nil
	})
	var np networkingv1.NetworkPolicy
	if err := w.c.Get(context.Background(), clientKey(w.ns, "foreign-network-policy"), &np); err != nil {
		t.Fatalf("unowned policy deleted: %v", err)
	}
}
