package blueprint

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/blueprint/blueprinttest"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

func baseTemplate() *extv1beta1.SandboxTemplate {
	return &extv1beta1.SandboxTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "t"},
		Spec: extv1beta1.SandboxTemplateSpec{SandboxBlueprint: sandboxv1beta1.SandboxBlueprint{
			PodTemplate: sandboxv1beta1.PodTemplate{
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "img:1"}}},
				ObjectMeta: sandboxv1beta1.PodMetadata{Labels: map[string]string{"a": "1"}, Annotations: map[string]string{"b": "2"}},
			},
			VolumeClaimTemplates: []sandboxv1beta1.PersistentVolumeClaimTemplate{blueprinttest.VCT("workspace", "1Gi"), blueprinttest.VCT("cache", "1Gi")},
		}},
	}
}

// sandboxFrom is what a pool makes of tmpl.
func sandboxFrom(tmpl *extv1beta1.SandboxTemplate) *sandboxv1beta1.Sandbox {
	sb := &sandboxv1beta1.Sandbox{}
	tmpl.Spec.SandboxBlueprint.DeepCopyInto(&sb.Spec.SandboxBlueprint)
	ApplySecureDefaults(tmpl, &sb.Spec.PodTemplate.Spec)
	return sb
}

func TestBlueprintMatches(t *testing.T) {
	cases := []struct {
		name  string
		edit  func(sb *sandboxv1beta1.Sandbox)
		match bool
	}{
		{"identical", func(*sandboxv1beta1.Sandbox) {}, true},
		{"pod template label drift ignored", func(sb *sandboxv1beta1.Sandbox) { sb.Spec.PodTemplate.ObjectMeta.Labels["a"] = "x" }, true},
		{"pod template annotation drift ignored", func(sb *sandboxv1beta1.Sandbox) {
			sb.Spec.PodTemplate.ObjectMeta.Annotations = map[string]string{labels.SafeToEvict: "true"}
		}, true},
		{"VCT metadata drift ignored", func(sb *sandboxv1beta1.Sandbox) {
			sb.Spec.VolumeClaimTemplates[0].Labels = map[string]string{"x": "y"}
		}, true},
		{"injected automount false is not drift", func(*sandboxv1beta1.Sandbox) {}, true},
		{"automount true vs false is drift", func(sb *sandboxv1beta1.Sandbox) { sb.Spec.PodTemplate.Spec.AutomountServiceAccountToken = ptr.To(true) }, false},
		{"DNS policy drift", func(sb *sandboxv1beta1.Sandbox) {
			sb.Spec.PodTemplate.Spec.DNSPolicy = corev1.DNSClusterFirst
			sb.Spec.PodTemplate.Spec.DNSConfig = nil
		}, false},
		{"image change", func(sb *sandboxv1beta1.Sandbox) { sb.Spec.PodTemplate.Spec.Containers[0].Image = "img:2" }, false},
		{"VCT reordered", func(sb *sandboxv1beta1.Sandbox) {
			v := sb.Spec.VolumeClaimTemplates
			v[0], v[1] = v[1], v[0]
		}, false},
		{"VCT name drift", func(sb *sandboxv1beta1.Sandbox) { sb.Spec.VolumeClaimTemplates[0].Name = "other" }, false},
		{"VCT storage class drift", func(sb *sandboxv1beta1.Sandbox) {
			sb.Spec.VolumeClaimTemplates[0].Spec.StorageClassName = ptr.To("fast")
		}, false},
		{"VCT removed", func(sb *sandboxv1beta1.Sandbox) { sb.Spec.VolumeClaimTemplates = sb.Spec.VolumeClaimTemplates[:1] }, false},
		{"VCT added", func(sb *sandboxv1beta1.Sandbox) {
			sb.Spec.VolumeClaimTemplates = append(sb.Spec.VolumeClaimTemplates, blueprinttest.VCT("more", "1Gi"))
		}, false},
		{"VCT resized", func(sb *sandboxv1beta1.Sandbox) {
			sb.Spec.VolumeClaimTemplates[0] = blueprinttest.VCT("workspace", "3Gi")
		}, false},
		{"service set vs unset", func(sb *sandboxv1beta1.Sandbox) { sb.Spec.Service = ptr.To(false) }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl := baseTemplate()
			sb := sandboxFrom(tmpl)
			c.edit(sb)
			if got := Matches(tmpl, sb); got != c.match {
				t.Errorf("Matches = %v, want %v", got, c.match)
			}
		})
	}
}

func TestTemplateDNSChangeIsDrift(t *testing.T) {
	tmpl := baseTemplate()
	tmpl.Spec.PodTemplate.Spec.DNSPolicy = corev1.DNSDefault
	sb := sandboxFrom(tmpl)
	tmpl.Spec.PodTemplate.Spec.DNSPolicy = corev1.DNSClusterFirst
	if Matches(tmpl, sb) {
		t.Fatal("Default -> ClusterFirst must be drift")
	}
}

func TestBlueprintHash(t *testing.T) {
	base := Hash(baseTemplate())
	if len(base) != 8 {
		t.Fatalf("hash %q is not 8 hex digits", base)
	}
	if Hash(baseTemplate()) != base {
		t.Fatal("hash is not deterministic")
	}
	edits := map[string]func(*extv1beta1.SandboxTemplate){
		"pod spec": func(t *extv1beta1.SandboxTemplate) { t.Spec.PodTemplate.Spec.Containers[0].Image = "img:2" },
		"VCT addition": func(t *extv1beta1.SandboxTemplate) {
			t.Spec.VolumeClaimTemplates = append(t.Spec.VolumeClaimTemplates, blueprinttest.VCT("x", "1Gi"))
		},
		"service toggle": func(t *extv1beta1.SandboxTemplate) { t.Spec.Service = ptr.To(true) },
	}
	for name, edit := range edits {
		tmpl := baseTemplate()
		edit(tmpl)
		if Hash(tmpl) == base {
			t.Errorf("%s does not change the blueprint hash", name)
		}
	}
	// Policies are not part of the blueprint.
	tmpl := baseTemplate()
	tmpl.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
	if Hash(tmpl) != base {
		t.Error("a policy change must not change the blueprint hash")
	}
	if PodTemplateHash(baseTemplate()) == base {
		t.Error("pod template hash should differ from the blueprint hash")
	}
}

// TestSandboxBlueprintFieldsAreCompared changes every field of
// SandboxBlueprint in turn and checks that Matches notices, so a
// field added to the API without being compared fails here.
func TestSandboxBlueprintFieldsAreCompared(t *testing.T) {
	mutations := map[string]func(*sandboxv1beta1.SandboxBlueprint){
		"PodTemplate":          func(b *sandboxv1beta1.SandboxBlueprint) { b.PodTemplate.Spec.Containers[0].Image = "changed" },
		"VolumeClaimTemplates": func(b *sandboxv1beta1.SandboxBlueprint) { b.VolumeClaimTemplates = nil },
		"Service":              func(b *sandboxv1beta1.SandboxBlueprint) { b.Service = ptr.To(true) },
	}
	typ := reflect.TypeOf(sandboxv1beta1.SandboxBlueprint{})
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i).Name
		mutate, ok := mutations[f]
		if !ok {
			t.Errorf("SandboxBlueprint.%s has no staleness test: add it to Matches and to this table", f)
			continue
		}
		tmpl := baseTemplate()
		sb := sandboxFrom(tmpl)
		mutate(&sb.Spec.SandboxBlueprint)
		if Matches(tmpl, sb) {
			t.Errorf("a change of SandboxBlueprint.%s is not detected", f)
		}
	}
}
