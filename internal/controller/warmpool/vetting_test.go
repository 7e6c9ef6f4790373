package warmpool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/extensions/exttest"
)

// A member whose spec a tenant edited after the pool created it is deleted
// and replaced under every strategy, even when the edit was reverted (the
// Pod may have been made from the edited spec meanwhile; the generation
// shows it). A Sandbox whose owner reference names the pool with another
// UID is not the pool's: neither counted nor deleted.
func TestPoolDeletesEditedMembers(t *testing.T) {
	for _, strategy := range []extv1beta1.UpdateStrategyType{extv1beta1.OnReplenishUpdateStrategyType, extv1beta1.RecreateUpdateStrategyType} {
		t.Run(string(strategy), func(t *testing.T) {
			f := newFixture(t, Options{})
			tmpl := exttest.NewTemplate(f.ns, "tmpl")
			f.create(tmpl, poolWithStrategy(f.ns, "p", "tmpl", 3, strategy))
			f.converge("p")
			ms := f.members("p")
			if len(ms) != 3 {
				t.Fatalf("%d members", len(ms))
			}
			edited, reverted, untouched := &ms[0], &ms[1], ms[2]
			f.edit(edited, func() {
				c := &edited.Spec.PodTemplate.Spec.Containers[0]
				c.Env = append(c.Env, corev1.EnvVar{Name: "PLANTED", Value: "x"})
				edited.Spec.PodTemplate.Spec.AutomountServiceAccountToken = ptr.To(true)
			})
			f.edit(reverted, func() { reverted.Spec.PodTemplate.Spec.Containers[0].Image = "attacker/backdoor:1" })
			f.edit(reverted, func() { reverted.Spec.PodTemplate.Spec.Containers[0].Image = exttest.PauseImage })
			impostor := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "impostor",
				Labels: map[string]string{}, OwnerReferences: []metav1.OwnerReference{{
					APIVersion: extv1beta1.GroupVersion.String(), Kind: "SandboxWarmPool", Name: "p",
					UID: "00000000-0000-0000-0000-000000000bad", Controller: ptr.To(true)}}}}
			for k, v := range untouched.Labels {
				impostor.Labels[k] = v
			}
			untouched.Spec.DeepCopyInto(&impostor.Spec)
			f.create(impostor)

			f.converge("p")
			p := f.pool("p")
			byUID := map[string]bool{}
			owned := 0
			for _, sb := range f.members("p") {
				byUID[string(sb.UID)] = true
				if ownedByPool(&sb, p) {
					owned++
				}
			}
			if byUID[string(edited.UID)] {
				t.Error("the edited member was kept")
			}
			if byUID[string(reverted.UID)] {
				t.Error("the edited-then-reverted member was kept")
			}
			if !byUID[string(untouched.UID)] {
				t.Error("the untouched member was deleted")
			}
			if !byUID[string(impostor.UID)] {
				t.Error("a Sandbox controlled by another UID was deleted")
			}
			if owned != 3 {
				t.Errorf("%d pool-owned members, want 3 (untouched plus two replacements; the impostor not counted)", owned)
			}
			if p.Status.Replicas != 3 {
				t.Errorf("status.replicas = %d, want 3", p.Status.Replicas)
			}
			if n := len(f.rec.byReason(ReasonForgedMember)); n != 2 {
				t.Errorf("%d %s events, want 2", n, ReasonForgedMember)
			}
		})
	}
}
