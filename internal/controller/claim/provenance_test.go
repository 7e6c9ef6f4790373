package claim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/ownerref"
)

// judgeClaimed accepts only the controller's own renderings for the claim,
// unedited, under a served reference to the claim's UID.
func TestJudgeClaimed(t *testing.T) {
	tmpl := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	tmpl.Spec.PodTemplate.Spec.Containers = []corev1.Container{{Name: "main", Image: "img"}}
	tmpl.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
	src := &warmSource{pool: &extv1beta1.SandboxWarmPool{}, tmpl: tmpl}
	warm := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: "w", UID: "warm-uid"}}
	warm.Spec.AdditionalPodMetadata.Labels = map[string]string{"sandbox.users.io/team": "a"}
	cold := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", UID: "cold-uid"}}
	cold.Spec.Env = []extv1beta1.EnvVar{{Name: "GREETING", Value: "hi"}}

	coldOf := func(c *extv1beta1.SandboxClaim) *sandboxv1beta1.Sandbox {
		sb, err := buildColdSandbox(c, tmpl)
		if err != nil {
			t.Fatal(err)
		}
		sb.Generation = 1
		return sb
	}
	warmOf := func(c *extv1beta1.SandboxClaim) *sandboxv1beta1.Sandbox {
		spec, err := warmRendering(c, tmpl, "")
		if err != nil {
			t.Fatal(err)
		}
		return &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: "pool-x", Generation: 1,
			OwnerReferences: []metav1.OwnerReference{ownerref.Claim(c)}}, Spec: *spec}
	}
	edit := func(sb *sandboxv1beta1.Sandbox, f func(*sandboxv1beta1.Sandbox)) *sandboxv1beta1.Sandbox {
		f(sb)
		return sb
	}
	for name, tc := range map[string]struct {
		sb    *sandboxv1beta1.Sandbox
		claim *extv1beta1.SandboxClaim
		src   *warmSource
		want  origin
	}{
		"warm adoption":        {warmOf(warm), warm, src, ours},
		"cold create":          {coldOf(cold), cold, src, ours},
		"cold of a warm claim": {coldOf(warm), warm, src, ours},
		// A claim with env never goes warm: the bare template is not its.
		"warm rendering, claim with env": {warmOf(cold), cold, src, impostor},
		"edited":                         {edit(coldOf(cold), func(sb *sandboxv1beta1.Sandbox) { sb.Generation = 2 }), cold, src, impostor},
		"planted token": {edit(coldOf(cold), func(sb *sandboxv1beta1.Sandbox) {
			sb.Spec.PodTemplate.Spec.AutomountServiceAccountToken = ptr.To(true)
		}), cold, src, impostor},
		"planted env": {edit(warmOf(warm), func(sb *sandboxv1beta1.Sandbox) {
			sb.Spec.PodTemplate.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "PLANTED", Value: "x"}}
		}), warm, src, impostor},
		"claim's pod label missing": {edit(warmOf(warm), func(sb *sandboxv1beta1.Sandbox) {
			sb.Spec.PodTemplate.ObjectMeta.Labels = nil
		}), warm, src, impostor},
		"unserved version": {edit(coldOf(cold), func(sb *sandboxv1beta1.Sandbox) {
			sb.OwnerReferences[0].APIVersion = extv1beta1.GroupVersion.Group + "/v0nonexistent"
		}), cold, src, foreign},
		"another claim's UID": {coldOf(cold), warm, src, foreign},
		"no template":         {coldOf(cold), cold, &warmSource{pool: src.pool}, unknown},
		"no pool":             {coldOf(cold), cold, nil, unknown},
	} {
		if got, why := judgeClaimed(tc.sb, tc.claim, tc.src); got != tc.want {
			t.Errorf("%s: origin %d (%s), want %d", name, got, why, tc.want)
		}
	}
}
