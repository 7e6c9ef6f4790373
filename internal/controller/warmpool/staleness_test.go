package warmpool

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"

	"sigs.k8s.io/agent-sandbox/internal/testenv"
)

func poolWithStrategy(ns, name, tmpl string, replicas int32, s extv1beta1.UpdateStrategyType) *extv1beta1.SandboxWarmPool {
	p := exttest.NewPool(ns, name, tmpl, replicas)
	if s != "" {
		p.Spec.UpdateStrategy = &extv1beta1.SandboxWarmPoolUpdateStrategy{Type: s}
	}
	return p
}

func image(sb *sandboxv1beta1.Sandbox) string { return sb.Spec.PodTemplate.Spec.Containers[0].Image }

func TestRolloutOnTemplateChange(t *testing.T) {
	testenv.SkipShort(t)
	for _, strategy := range []extv1beta1.UpdateStrategyType{"", extv1beta1.OnReplenishUpdateStrategyType, extv1beta1.RecreateUpdateStrategyType} {
		t.Run(string(strategy)+"default", func(t *testing.T) {
			f := newFixture(t, Options{})
			tmpl := exttest.NewTemplate(f.ns, "tmpl")
			f.create(tmpl, poolWithStrategy(f.ns, "p", "tmpl", 2, strategy))
			f.converge("p")
			old := f.members("p")

			f.edit(tmpl, func() { tmpl.Spec.PodTemplate.Spec.Containers[0].Image = "img:v2" })
			f.converge("p")
			now := f.members("p")
			if len(now) != 2 {
				t.Fatalf("%d members after rollout", len(now))
			}
			for _, sb := range now {
				replaced := true
				for _, o := range old {
					if o.UID == sb.UID {
						replaced = false
					}
				}
				if strategy == extv1beta1.RecreateUpdateStrategyType && (!replaced || image(&sb) != "img:v2") {
					t.Errorf("Recreate kept stale member %s (%s)", sb.Name, image(&sb))
				}
				if strategy != extv1beta1.RecreateUpdateStrategyType && (replaced || image(&sb) != exttest.PauseImage) {
					t.Errorf("%q replaced member %s", strategy, sb.Name)
				}
			}
			if strategy == extv1beta1.RecreateUpdateStrategyType {
				return
			}
			// OnReplenish: a replacement uses the new template.
			if err := env.Client.Delete(context.Background(), &now[0]); err != nil {
				t.Fatal(err)
			}
			f.settle("p")
			f.converge("p")
			newer := 0
			for _, sb := range f.members("p") {
				if image(&sb) == "img:v2" {
					newer++
				}
			}
			if newer != 1 {
				t.Fatalf("%d members with the new image, want the 1 replacement", newer)
			}
		})
	}
}

// Repointing a Recreate pool at an identical template still recreates: the
// template name selects the NetworkPolicy.
func TestRecreateRepointToIdenticalTemplate(t *testing.T) {
	f := newFixture(t, Options{})
	f.create(exttest.NewTemplate(f.ns, "a"), exttest.NewTemplate(f.ns, "b"), poolWithStrategy(f.ns, "p", "a", 1, extv1beta1.RecreateUpdateStrategyType))
	f.converge("p")
	p := f.pool("p")
	f.edit(p, func() { p.Spec.SandboxTemplateRef.Name = "b" })
	f.converge("p")
	ms := f.members("p")
	if len(ms) != 1 || ms[0].Labels[labels.SandboxTemplateRefHash] != labels.NameHash("b") ||
		ms[0].Annotations[labels.SandboxTemplateRef] != "b" || image(&ms[0]) != exttest.PauseImage {
		t.Fatalf("member after repoint: %+v", ms)
	}
}

// A DNS policy change is real drift: under Recreate the stale members go in
// one pass and the replacements come on the next, once the deletes are
// observed (terminating members count against the target meanwhile).
func TestRecreateDNSPolicyChangeTwoPasses(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl := exttest.NewTemplate(f.ns, "tmpl")
	tmpl.Spec.PodTemplate.Spec.DNSPolicy = corev1.DNSDefault
	f.create(tmpl, poolWithStrategy(f.ns, "p", "tmpl", 3, extv1beta1.RecreateUpdateStrategyType))
	f.converge("p")
	f.edit(tmpl, func() { tmpl.Spec.PodTemplate.Spec.DNSPolicy = corev1.DNSClusterFirst })

	before := f.creates()
	f.reconcile("p")
	if got := f.writes.Count("delete", "sandboxes"); got != 3 {
		t.Fatalf("first pass deleted %d, want all 3 stale members", got)
	}
	if f.creates() != before {
		t.Fatal("replacements created before the deletes were observed")
	}
	f.settle("p")
	f.converge("p")
	ms := f.members("p")
	if len(ms) != 3 {
		t.Fatalf("%d members", len(ms))
	}
	for _, sb := range ms {
		if sb.Spec.PodTemplate.Spec.DNSPolicy != corev1.DNSClusterFirst {
			t.Errorf("replacement %s has dnsPolicy %q", sb.Name, sb.Spec.PodTemplate.Spec.DNSPolicy)
		}
	}
}

func TestMetadataOnlyTemplateChangeDoesNotRoll(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl := exttest.NewTemplate(f.ns, "tmpl")
	f.create(tmpl, poolWithStrategy(f.ns, "p", "tmpl", 2, extv1beta1.RecreateUpdateStrategyType))
	f.converge("p")
	f.edit(tmpl, func() {
		tmpl.Spec.PodTemplate.ObjectMeta.Labels = map[string]string{"team": "x"}
		tmpl.Spec.PodTemplate.ObjectMeta.Annotations = map[string]string{"note": "y"}
	})
	f.converge("p")
	if n := f.writes.Count("delete", "sandboxes"); n != 0 {
		t.Fatalf("metadata-only change deleted %d members", n)
	}
}

// orphan returns a Sandbox that carries pool p's labels but has no owner.
func orphan(f *fixture, name string, tmpl *extv1beta1.SandboxTemplate, spoofHash bool) *sandboxv1beta1.Sandbox {
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{
		Namespace: f.ns, Name: name,
		Labels: map[string]string{
			labels.WarmPoolSandbox:        labels.NameHash("p"),
			labels.SandboxTemplateRefHash: labels.NameHash(tmpl.Name),
		},
	}}
	tmpl.Spec.SandboxBlueprint.DeepCopyInto(&sb.Spec.SandboxBlueprint)
	blueprint.ApplySecureDefaults(tmpl, &sb.Spec.PodTemplate.Spec)
	if spoofHash {
		sb.Labels[labels.SandboxTemplateHash] = blueprint.Hash(tmpl)
		sb.Spec.PodTemplate.Spec.Containers[0].Image = "attacker/backdoor:latest"
	}
	return sb
}

// Orphans carrying the pool label: a genuine one (spec matches the
// template) is adopted; one with a forged hash label but a different spec
// is deleted, never handed to claims; one controlled by something else is
// left alone and not counted.
func TestOrphansAdoptedOrRejected(t *testing.T) {
	f := newFixture(t, Options{})
	tmpl := exttest.NewTemplate(f.ns, "tmpl")
	f.create(tmpl)
	f.cached(tmpl)
	genuine := orphan(f, "genuine", tmpl, false)
	forged := orphan(f, "forged", tmpl, true)
	foreign := orphan(f, "foreign", tmpl, false)
	foreign.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "uid-x", Controller: ptr.To(true)}}
	f.create(genuine, forged, foreign)
	f.create(exttest.NewPool(f.ns, "p", "tmpl", 2))
	f.converge("p")

	p := f.pool("p")
	byName := map[string]sandboxv1beta1.Sandbox{}
	owned := 0
	for _, sb := range f.members("p") {
		byName[sb.Name] = sb
		if ownedByPool(&sb, p) {
			owned++
		}
	}
	if g, ok := byName["genuine"]; !ok || !ownedByPool(&g, p) || g.Labels[labels.LaunchType] != "warm" {
		t.Errorf("genuine orphan not adopted: %+v", g.ObjectMeta)
	}
	if _, ok := byName["forged"]; ok {
		t.Error("orphan with a forged hash label and a different spec was kept")
	}
	if fo, ok := byName["foreign"]; !ok || ownedByPool(&fo, p) || fo.ResourceVersion != foreign.ResourceVersion {
		t.Error("a Sandbox controlled by something else was touched")
	}
	if owned != 2 {
		t.Errorf("%d pool-owned members, want 2 (the adopted orphan plus one created)", owned)
	}
}
