package warmpool

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/controller/template"
	"sigs.k8s.io/agent-sandbox/internal/labels"
)

// templateInfo is what a pass knows about the pool's template.
type templateInfo struct {
	tmpl            *extv1beta1.SandboxTemplate
	blueprintHash   string
	podTemplateHash string
}

func newTemplateInfo(tmpl *extv1beta1.SandboxTemplate) *templateInfo {
	return &templateInfo{tmpl: tmpl, blueprintHash: template.BlueprintHash(tmpl), podTemplateHash: template.PodTemplateHash(tmpl)}
}

// ownerRef is the controller reference pool Sandboxes carry. Deleting the
// pool deletes its unclaimed Sandboxes through garbage collection.
func ownerRef(pool *extv1beta1.SandboxWarmPool) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{
		APIVersion:         extv1beta1.GroupVersion.String(),
		Kind:               "SandboxWarmPool",
		Name:               pool.Name,
		UID:                pool.UID,
		Controller:         &yes,
		BlockOwnerDeletion: &yes,
	}
}

// buildSandbox renders the Sandbox a pool creates: a copy of the template's
// blueprint with secure defaults, labelled as a warm member of the pool with
// the template hashes that later decide staleness. One object is built per
// reconcile and deep-copied per create.
func buildSandbox(pool *extv1beta1.SandboxWarmPool, ti *templateInfo, enableEviction bool) *sandboxv1beta1.Sandbox {
	tmpl := ti.tmpl
	poolLabels := map[string]string{
		labels.WarmPoolSandbox:        labels.NameHash(pool.Name),
		labels.SandboxTemplateRefHash: labels.NameHash(tmpl.Name),
		labels.SandboxPodTemplateHash: ti.podTemplateHash,
		labels.SandboxTemplateHash:    ti.blueprintHash,
	}
	sb := &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName:    pool.Name + "-",
			Namespace:       pool.Namespace,
			Labels:          map[string]string{labels.LaunchType: labels.LaunchTypeWarm, labels.CreatedBy: labels.CreatedByController},
			Annotations:     map[string]string{labels.SandboxTemplateRef: tmpl.Name},
			OwnerReferences: []metav1.OwnerReference{ownerRef(pool)},
		},
	}
	tmpl.Spec.SandboxBlueprint.DeepCopyInto(&sb.Spec.SandboxBlueprint)
	meta := &sb.Spec.PodTemplate.ObjectMeta
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	for k, v := range poolLabels {
		sb.Labels[k] = v
		// The Sandbox controller ignores system keys in the pod template;
		// they are kept there for tools that read the published layout.
		meta.Labels[k] = v
	}
	if _, set := meta.Annotations[labels.SafeToEvict]; !set && enableEviction {
		// An idle warm pod is cheap to recreate, so let the cluster
		// autoscaler drain its node. The mark sits on the Sandbox's own
		// metadata, not in its pod template: the Sandbox controller copies
		// it to the Pod only while a pool controls the Sandbox, so adoption
		// drops it with a metadata patch instead of a spec change (which
		// would bump the generation and cost one more status write).
		sb.Annotations[labels.SafeToEvict] = "true"
	}
	template.ApplySandboxSecureDefaults(tmpl, &sb.Spec.PodTemplate.Spec)
	return sb
}
