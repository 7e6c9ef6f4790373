package blueprint

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/api/equality"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// Hash is the rollout key of a template: NameHash of the JSON of
// its SandboxBlueprint. Warm pool Sandboxes carry it in the
// sandbox-template-hash label; a different value means "maybe stale", which
// Matches then decides. It returns "" if the blueprint cannot be
// encoded, which callers treat as "cannot tell".
func Hash(tmpl *extv1beta1.SandboxTemplate) string {
	b, err := json.Marshal(tmpl.Spec.SandboxBlueprint)
	if err != nil {
		return ""
	}
	return labels.NameHash(string(b))
}

// PodTemplateHash is the deprecated hash of the pod template alone, kept in
// the sandbox-pod-template-hash label for tools that still read it.
func PodTemplateHash(tmpl *extv1beta1.SandboxTemplate) string {
	b, err := json.Marshal(tmpl.Spec.PodTemplate)
	if err != nil {
		return ""
	}
	return labels.NameHash(string(b))
}

// Matches reports whether a Sandbox's blueprint is what tmpl would
// produce today, comparing semantically rather than by hash label (a label
// can be forged or computed by another implementation):
//
//   - the pod spec against the template's with secure defaults applied, so
//     defaults the controller injected are not drift but a real change of
//     the same fields is;
//   - volume claim templates index by index, by name and spec only (their
//     metadata and the pod template metadata never trigger a rollout);
//   - the service toggle, where unset and set differ.
//
// Every field of SandboxBlueprint must be compared here; a test walks the
// struct to enforce it.
func Matches(tmpl *extv1beta1.SandboxTemplate, sb *sandboxv1beta1.Sandbox) bool {
	want := tmpl.Spec.PodTemplate.Spec.DeepCopy()
	ApplySecureDefaults(tmpl, want)
	if !equality.Semantic.DeepEqual(*want, sb.Spec.PodTemplate.Spec) {
		return false
	}
	if !volumeClaimTemplatesMatch(tmpl.Spec.VolumeClaimTemplates, sb.Spec.VolumeClaimTemplates) {
		return false
	}
	return equality.Semantic.DeepEqual(tmpl.Spec.Service, sb.Spec.Service)
}

func volumeClaimTemplatesMatch(want, got []sandboxv1beta1.PersistentVolumeClaimTemplate) bool {
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		if want[i].Name != got[i].Name || !equality.Semantic.DeepEqual(want[i].Spec, got[i].Spec) {
			return false
		}
	}
	return true
}
