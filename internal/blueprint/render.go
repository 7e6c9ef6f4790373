package blueprint

import (
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/labels"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// Spec is the spec every Sandbox rendered from tmpl starts from: a deep
// copy of the template's blueprint (tmpl is usually the informer's shared
// object and is never changed) with the secure defaults applied and, when
// deliveryKey is set, the controller's late-binding key injected by
// latebind.InjectKey's rule. The pod template metadata is the template's;
// each renderer adds its own.
func Spec(tmpl *extv1beta1.SandboxTemplate, deliveryKey string) sandboxv1beta1.SandboxSpec {
	var spec sandboxv1beta1.SandboxSpec
	tmpl.Spec.SandboxBlueprint.DeepCopyInto(&spec.SandboxBlueprint)
	ApplySecureDefaults(tmpl, &spec.PodTemplate.Spec)
	latebind.InjectKey(tmpl.Spec.EnvVarsInjectionPolicy, &spec.PodTemplate.Spec, deliveryKey)
	return spec
}

// Hashes are a template's rollout hashes, computed once per pass.
type Hashes struct {
	// Blueprint is Hash(tmpl), the sandbox-template-hash label.
	Blueprint string
	// PodTemplate is PodTemplateHash(tmpl), the deprecated
	// sandbox-pod-template-hash label.
	PodTemplate string
}

// HashesOf computes the Hashes of tmpl.
func HashesOf(tmpl *extv1beta1.SandboxTemplate) Hashes {
	return Hashes{Blueprint: Hash(tmpl), PodTemplate: PodTemplateHash(tmpl)}
}

// Pool is what a warm pool member's rendering depends on besides the
// template.
type Pool struct {
	// Name of the pool; members carry its hash (warm-pool-sandbox label).
	Name string
	// Hashes of the template (HashesOf), which later decide staleness.
	Hashes Hashes
	// SafeToEvict marks the member evictable by the cluster autoscaler,
	// unless the template's pod annotations already say.
	SafeToEvict bool
	// DeliveryKey is the controller's late-binding public key, injected
	// into members of templates that allow claim env; "" for none.
	DeliveryKey string
}

// ForPool renders a warm pool member from tmpl: labelled as a warm member
// of the pool, created by the controller, with the template hashes, on
// both the Sandbox and its pod template (the Sandbox controller ignores
// system keys in the pod template; they are kept there for tools that read
// the published layout). Name, namespace and owner reference are the
// pool's to set.
func ForPool(tmpl *extv1beta1.SandboxTemplate, p Pool) *sandboxv1beta1.Sandbox {
	sb := newSandbox(tmpl, labels.LaunchTypeWarm, p.DeliveryKey)
	sb.Labels[labels.CreatedBy] = labels.CreatedByController
	meta := &sb.Spec.PodTemplate.ObjectMeta
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	for k, v := range map[string]string{
		labels.WarmPoolSandbox:        labels.NameHash(p.Name),
		labels.SandboxPodTemplateHash: p.Hashes.PodTemplate,
		labels.SandboxTemplateHash:    p.Hashes.Blueprint,
	} {
		sb.Labels[k] = v
		meta.Labels[k] = v
	}
	selectPods(sb, tmpl)
	if _, set := meta.Annotations[labels.SafeToEvict]; !set && p.SafeToEvict {
		// An idle warm pod is cheap to recreate, so let the cluster
		// autoscaler drain its node. The mark sits on the Sandbox's own
		// metadata, not in its pod template: the Sandbox controller copies
		// it to the Pod only while a pool controls the Sandbox, so adoption
		// drops it with a metadata patch instead of a spec change (which
		// would bump the generation and cost one more status write).
		sb.Annotations[labels.SafeToEvict] = "true"
	}
	return sb
}

// Claim is what a claim's cold start decides under the template's
// policies, by the claim controller's rules (merge without override, the
// volume claim templates policy); the renderer takes it as given.
type Claim struct {
	// VolumeClaimTemplates replace the template's.
	VolumeClaimTemplates []sandboxv1beta1.PersistentVolumeClaimTemplate
	// PodLabels and PodAnnotations are the pod template's user metadata:
	// the template's plus the claim's additions. Empty annotations keep
	// the template's.
	PodLabels, PodAnnotations map[string]string
}

// ForClaim renders the Sandbox of claim's cold start from tmpl: labelled
// as a cold start of the claim (its UID, on the Sandbox and the pod
// template), with the claim's created-by label and trace context when it
// has them. The claim's env, name, namespace and owner reference are the
// claim controller's to set.
func ForClaim(tmpl *extv1beta1.SandboxTemplate, claim *extv1beta1.SandboxClaim, in Claim) *sandboxv1beta1.Sandbox {
	sb := newSandbox(tmpl, labels.LaunchTypeCold, "")
	sb.Labels[labels.ClaimUID] = string(claim.UID)
	if tc, ok := claim.Annotations[labels.TraceContext]; ok {
		sb.Annotations[labels.TraceContext] = tc
	}
	createdBy, hasCreatedBy := claim.Labels[labels.CreatedBy]
	if hasCreatedBy {
		sb.Labels[labels.CreatedBy] = createdBy
	}
	sb.Spec.VolumeClaimTemplates = deepCopyVCTs(in.VolumeClaimTemplates)
	meta := &sb.Spec.PodTemplate.ObjectMeta
	meta.Labels = maps.Clone(in.PodLabels)
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	meta.Labels[labels.ClaimUID] = string(claim.UID)
	if hasCreatedBy {
		meta.Labels[labels.CreatedBy] = createdBy
	}
	selectPods(sb, tmpl)
	if len(in.PodAnnotations) > 0 {
		meta.Annotations = maps.Clone(in.PodAnnotations)
	}
	return sb
}

// Direct is what a Sandbox made straight from a template (no claim, no
// pool: the CLI's create --template) adds to the rendering.
type Direct struct {
	// Labels go on the Sandbox over the rendering's own (launch type and
	// template reference hash included: the creator labels its object).
	Labels map[string]string
	// Annotations go on the Sandbox next to the template reference.
	Annotations map[string]string
	// PodLabels and PodAnnotations are added to the pod template where the
	// template does not set the key (the template wins).
	PodLabels, PodAnnotations map[string]string
}

// ForDirect renders a Sandbox made directly from tmpl the way a claim's
// cold start is (template labels and annotation, secure defaults,
// NetworkPolicy selector), minus the claim. Name, namespace, env and
// expiry are the caller's to set.
func ForDirect(tmpl *extv1beta1.SandboxTemplate, d Direct) *sandboxv1beta1.Sandbox {
	sb := newSandbox(tmpl, labels.LaunchTypeCold, "")
	maps.Copy(sb.Labels, d.Labels)
	maps.Copy(sb.Annotations, d.Annotations)
	meta := &sb.Spec.PodTemplate.ObjectMeta
	if meta.Labels == nil {
		meta.Labels = map[string]string{}
	}
	addMissing(meta.Labels, d.PodLabels)
	selectPods(sb, tmpl)
	if len(d.PodAnnotations) > 0 {
		if meta.Annotations == nil {
			meta.Annotations = map[string]string{}
		}
		addMissing(meta.Annotations, d.PodAnnotations)
	}
	return sb
}

// newSandbox is Spec(tmpl, deliveryKey) with the metadata every rendering
// carries: the launch type, the template's name (annotation) and its name
// hash (label).
func newSandbox(tmpl *extv1beta1.SandboxTemplate, launchType, deliveryKey string) *sandboxv1beta1.Sandbox {
	return &sandboxv1beta1.Sandbox{
		ObjectMeta: metav1.ObjectMeta{
			Labels: map[string]string{
				labels.LaunchType:             launchType,
				labels.SandboxTemplateRefHash: labels.NameHash(tmpl.Name),
			},
			Annotations: map[string]string{labels.SandboxTemplateRef: tmpl.Name},
		},
		Spec: Spec(tmpl, deliveryKey),
	}
}

// selectPods puts the template's name hash on the pod template: it is the
// pod selector of the template's NetworkPolicy (NetworkPolicySpec), so it
// is written last, over any value the template or a caller chose, and a
// Sandbox cannot render itself out of its template's policy. The pod
// template labels must exist.
func selectPods(sb *sandboxv1beta1.Sandbox, tmpl *extv1beta1.SandboxTemplate) {
	sb.Spec.PodTemplate.ObjectMeta.Labels[labels.SandboxTemplateRefHash] = labels.NameHash(tmpl.Name)
}

// addMissing copies the keys of extra that dst lacks.
func addMissing(dst, extra map[string]string) {
	for k, v := range extra {
		if _, taken := dst[k]; !taken {
			dst[k] = v
		}
	}
}

func deepCopyVCTs(in []sandboxv1beta1.PersistentVolumeClaimTemplate) []sandboxv1beta1.PersistentVolumeClaimTemplate {
	if in == nil {
		return nil
	}
	out := make([]sandboxv1beta1.PersistentVolumeClaimTemplate, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
