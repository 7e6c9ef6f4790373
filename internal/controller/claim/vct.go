package claim

import (
	"fmt"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

type vctList = []sandboxv1beta1.PersistentVolumeClaimTemplate

// validateVCTs checks that every volume claim template has a unique,
// non-empty name: the name is both the pod volume and the PVC prefix.
func validateVCTs(vcts vctList, owner string) error {
	seen := map[string]bool{}
	for i, v := range vcts {
		if v.Name == "" {
			return fmt.Errorf("invalid volume claim templates: %s entry %d has no name", owner, i)
		}
		if seen[v.Name] {
			return fmt.Errorf("invalid volume claim templates: %s has duplicate name %q", owner, v.Name)
		}
		seen[v.Name] = true
	}
	return nil
}

// mergeVCTs returns the volume claim templates of a cold Sandbox: the
// template's, plus or replaced by the claim's as the template's
// volumeClaimTemplatesPolicy allows. Errors are user errors reported as
// VolumeClaimTemplatesError.
func mergeVCTs(tmpl *extv1beta1.SandboxTemplate, claimVCTs vctList) (vctList, error) {
	base := tmpl.Spec.VolumeClaimTemplates
	if err := validateVCTs(base, "template"); err != nil {
		return nil, errVolumeClaimTemplates(err)
	}
	if len(claimVCTs) == 0 {
		return deepCopyVCTs(base), nil
	}
	if err := validateVCTs(claimVCTs, "claim"); err != nil {
		return nil, errVolumeClaimTemplates(err)
	}
	inBase := map[string]int{}
	for i, v := range base {
		inBase[v.Name] = i
	}
	switch tmpl.Spec.VolumeClaimTemplatesPolicy {
	case extv1beta1.VolumeClaimTemplatesPolicyAllowed:
		for _, v := range claimVCTs {
			if _, ok := inBase[v.Name]; ok {
				return nil, errVolumeClaimTemplates(fmt.Errorf("overriding volume claim templates is forbidden by the template: cannot override template volume %q", v.Name))
			}
		}
		return append(deepCopyVCTs(base), deepCopyVCTs(claimVCTs)...), nil
	case extv1beta1.VolumeClaimTemplatesPolicyOverrides:
		out := deepCopyVCTs(base)
		for _, v := range claimVCTs {
			if i, ok := inBase[v.Name]; ok {
				out[i] = *v.DeepCopy()
			} else {
				out = append(out, *v.DeepCopy())
			}
		}
		return out, nil
	default:
		return nil, errVolumeClaimTemplates(fmt.Errorf("volume claim templates are disallowed by the template"))
	}
}

func deepCopyVCTs(in vctList) vctList {
	if in == nil {
		return nil
	}
	out := make(vctList, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
