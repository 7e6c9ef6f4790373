package warmpool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

func testTemplate() *extv1beta1.SandboxTemplate {
	return &extv1beta1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "tmpl", Namespace: "ns"},
		Spec: extv1beta1.SandboxTemplateSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
			PodTemplate: sandboxv1beta1.PodTemplate{
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "img"}}},
				ObjectMeta: sandboxv1beta1.PodMetadata{Labels: map[string]string{"team": "a"}},
			},
			VolumeClaimTemplates: []sandboxv1beta1.PersistentVolumeClaimTemplate{{
				EmbeddedObjectMetadata: sandboxv1beta1.EmbeddedObjectMetadata{Name: "workspace"},
			}},
		}},
	}
}

func testPool() *extv1beta1.SandboxWarmPool {
	return &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "pool", Namespace: "ns", UID: "pool-uid"}}
}

func TestBuildSandbox(t *testing.T) {
	tmpl := testTemplate()
	ti := newTemplateInfo(tmpl)
	sb := buildSandbox(testPool(), ti, true, "")

	if sb.GenerateName != "pool-" || sb.Namespace != "ns" {
		t.Errorf("name %q/%q", sb.Namespace, sb.GenerateName)
	}
	ref := metav1.GetControllerOf(sb)
	if ref == nil || ref.Kind != "SandboxWarmPool" || ref.UID != "pool-uid" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
		t.Errorf("owner = %+v", ref)
	}
	want := map[string]string{
		labels.WarmPoolSandbox:        labels.NameHash("pool"),
		labels.SandboxTemplateRefHash: labels.NameHash("tmpl"),
		labels.LaunchType:             "warm",
		labels.SandboxPodTemplateHash: ti.podTemplateHash,
		labels.SandboxTemplateHash:    ti.blueprintHash,
		labels.CreatedBy:              "controller",
	}
	for k, v := range want {
		if sb.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, sb.Labels[k], v)
		}
	}
	for _, k := range []string{labels.WarmPoolSandbox, labels.SandboxTemplateRefHash, labels.SandboxPodTemplateHash, labels.SandboxTemplateHash} {
		if sb.Spec.PodTemplate.ObjectMeta.Labels[k] != want[k] {
			t.Errorf("pod template label %s missing", k)
		}
	}
	if sb.Spec.PodTemplate.ObjectMeta.Labels["team"] != "a" {
		t.Error("template pod label lost")
	}
	if sb.Annotations[labels.SandboxTemplateRef] != "tmpl" {
		t.Errorf("annotations = %v", sb.Annotations)
	}
	if len(sb.Spec.VolumeClaimTemplates) != 1 || sb.Spec.VolumeClaimTemplates[0].Name != "workspace" {
		t.Errorf("VCTs = %+v", sb.Spec.VolumeClaimTemplates)
	}
	if !ptr.Equal(sb.Spec.PodTemplate.Spec.AutomountServiceAccountToken, ptr.To(false)) || sb.Spec.PodTemplate.Spec.DNSPolicy != corev1.DNSNone {
		t.Errorf("secure defaults not applied: %+v", sb.Spec.PodTemplate.Spec)
	}
	// Building must not alias the template.
	sb.Spec.PodTemplate.ObjectMeta.Labels["team"] = "b"
	if tmpl.Spec.PodTemplate.ObjectMeta.Labels["team"] != "a" {
		t.Error("buildSandbox aliases the template's maps")
	}
	if tmpl.Spec.PodTemplate.Spec.AutomountServiceAccountToken != nil {
		t.Error("buildSandbox mutated the template spec")
	}
}

func TestEvictionAnnotationMatrix(t *testing.T) {
	cases := []struct {
		name     string
		flag     bool
		template *string
		poolMark bool // safe-to-evict "true" on the Sandbox's metadata
	}{
		{"flag on, template silent", true, nil, true},
		{"flag off, template silent", false, nil, false},
		{"flag on, template false", true, ptr.To("false"), false},
		{"flag on, template true", true, ptr.To("true"), false},
		{"flag off, template true", false, ptr.To("true"), false},
		{"flag off, template false", false, ptr.To("false"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl := testTemplate()
			if c.template != nil {
				tmpl.Spec.PodTemplate.ObjectMeta.Annotations = map[string]string{labels.SafeToEvict: *c.template}
			}
			sb := buildSandbox(testPool(), newTemplateInfo(tmpl), c.flag, "")
			// An explicit template value stays in the pod template and wins.
			v, ok := sb.Spec.PodTemplate.ObjectMeta.Annotations[labels.SafeToEvict]
			if (c.template == nil) == ok || (ok && v != *c.template) {
				t.Errorf("pod template safe-to-evict = %q (set %v), want %v", v, ok, ptr.Deref(c.template, "<unset>"))
			}
			if got := sb.Annotations[labels.SafeToEvict] == "true"; got != c.poolMark {
				t.Errorf("Sandbox safe-to-evict mark = %v, want %v (annotations %v)", got, c.poolMark, sb.Annotations)
			}
		})
	}
}

func TestBuildSandboxSecureDefaultsFollowPolicy(t *testing.T) {
	tmpl := testTemplate()
	tmpl.Spec.NetworkPolicyManagement = extv1beta1.NetworkPolicyManagementUnmanaged
	tmpl.Spec.PodTemplate.Spec.AutomountServiceAccountToken = ptr.To(true)
	sb := buildSandbox(testPool(), newTemplateInfo(tmpl), true, "")
	if sb.Spec.PodTemplate.Spec.DNSPolicy != "" {
		t.Error("DNS isolation applied to an Unmanaged template")
	}
	if !ptr.Deref(sb.Spec.PodTemplate.Spec.AutomountServiceAccountToken, false) {
		t.Error("explicit automount true not preserved")
	}
}
