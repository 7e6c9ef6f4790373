package claim

import (
	"maps"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// desiredPodMetadata returns the user-visible pod template labels and
// annotations of a claimed Sandbox: the template's own plus the claim's
// additionalPodMetadata, which may add keys but not change template values.
// Without the template (it could not be read) the Sandbox's current
// metadata stands in for it. Either way the pool's safe-to-evict "true"
// goes: a claimed pod is in use and must not be evicted for bin-packing,
// while a value the template or the claim sets explicitly is kept.
func desiredPodMetadata(cur sandboxv1beta1.PodMetadata, tmpl *extv1beta1.SandboxTemplate, claim *extv1beta1.SandboxClaim) (map[string]string, map[string]string, error) {
	var baseL, baseA map[string]string
	if tmpl != nil {
		baseL = labels.UserKeys(tmpl.Spec.PodTemplate.ObjectMeta.Labels)
		baseA = labels.UserKeys(tmpl.Spec.PodTemplate.ObjectMeta.Annotations)
	} else {
		baseL = labels.UserKeys(cur.Labels)
		baseA = labels.UserKeys(cur.Annotations)
		if baseA[labels.SafeToEvict] == "true" {
			delete(baseA, labels.SafeToEvict)
		}
	}
	l, err := mergeNoOverride("label", baseL, claim.Spec.AdditionalPodMetadata.Labels)
	if err != nil {
		return nil, nil, err
	}
	a, err := mergeNoOverride("annotation", baseA, claim.Spec.AdditionalPodMetadata.Annotations)
	if err != nil {
		return nil, nil, err
	}
	return l, a, nil
}

// podMetadataPatch returns the merge-patch of spec.podTemplate.metadata that
// turns cur into the desired user keys plus the claim's system labels, or
// nil when the user-visible keys already match. System keys alone never
// justify a write: the Sandbox controller ignores them, and writing the
// spec bumps the Sandbox generation, which costs a status write.
func podMetadataPatch(cur sandboxv1beta1.PodMetadata, wantL, wantA map[string]string, claim *extv1beta1.SandboxClaim, templateRefHash string) map[string]any {
	if maps.Equal(labels.UserKeys(cur.Labels), wantL) && maps.Equal(labels.UserKeys(cur.Annotations), wantA) {
		return nil
	}
	lp := userKeysPatch(cur.Labels, wantL)
	for _, k := range []string{labels.WarmPoolSandbox, labels.SandboxPodTemplateHash, labels.SandboxTemplateHash} {
		if _, ok := cur.Labels[k]; ok {
			lp[k] = nil
		}
	}
	lp[labels.ClaimUID] = string(claim.UID)
	if templateRefHash != "" {
		lp[labels.SandboxTemplateRefHash] = templateRefHash
	}
	if v, ok := claim.Labels[labels.CreatedBy]; ok {
		lp[labels.CreatedBy] = v
	} else if _, ok := cur.Labels[labels.CreatedBy]; ok {
		lp[labels.CreatedBy] = nil
	}
	return map[string]any{"labels": lp, "annotations": userKeysPatch(cur.Annotations, wantA)}
}

// userKeysPatch is the merge patch of a label or annotation map that turns
// cur's user keys into want: user keys want lacks are removed (null),
// want's are set, system keys are left to the caller.
func userKeysPatch(cur, want map[string]string) map[string]any {
	p := make(map[string]any, len(want))
	for k := range cur {
		if _, keep := want[k]; !keep && !labels.IsSystemKey(k) {
			p[k] = nil
		}
	}
	for k, v := range want {
		p[k] = v
	}
	return p
}

// podTemplateMetadata places a podMetadataPatch at
// spec.podTemplate.metadata, as a merge patch's Fields.
func podTemplateMetadata(pm map[string]any) map[string]any {
	return map[string]any{"spec": map[string]any{"podTemplate": map[string]any{"metadata": pm}}}
}
