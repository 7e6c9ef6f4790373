package v1alpha1

import (
	"fmt"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/conversion"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/api/internal/convstate"
)

const (
	// SandboxWarmPoolStateAnnotation is the reference's v1alpha1 state key
	// for pools. v1alpha1 pools convert without loss, so it is only removed.
	SandboxWarmPoolStateAnnotation = "api.agents.x-k8s.io/v1alpha1-sandboxwarmpool-state"
	// SandboxWarmPoolHubStateAnnotation keeps, on a v1alpha1 pool, the
	// v1beta1 fields v1alpha1 cannot hold.
	SandboxWarmPoolHubStateAnnotation = "api.agents.x-k8s.io/v1beta1-sandboxwarmpool-state"
)

type warmPoolHubState struct {
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// replicasUnset records a nil spec.replicas (the apiserver defaults it
	// to 1, so only in-memory objects have it).
	ReplicasUnset bool `json:"replicasUnset,omitempty"`
}

var _ conversion.Convertible = &SandboxWarmPool{}

// ConvertTo converts this v1alpha1 pool to the v1beta1 hub.
func (p *SandboxWarmPool) ConvertTo(dstRaw conversion.Hub) error {
	dst, ok := dstRaw.(*extv1beta1.SandboxWarmPool)
	if !ok {
		return fmt.Errorf("converting v1alpha1 SandboxWarmPool: unexpected hub type %T", dstRaw)
	}
	meta := p.ObjectMeta.DeepCopy()
	var hub warmPoolHubState
	if _, err := convstate.Take(&meta.Annotations, SandboxWarmPoolHubStateAnnotation, &hub); err != nil {
		return fmt.Errorf("converting SandboxWarmPool %s/%s to v1beta1: %w", p.Namespace, p.Name, err)
	}
	convstate.Drop(&meta.Annotations, SandboxWarmPoolStateAnnotation)
	replicas := ptr.To(p.Spec.Replicas)
	if hub.ReplicasUnset && p.Spec.Replicas == 1 {
		replicas = nil
	}
	dst.ObjectMeta = *meta
	dst.Spec = extv1beta1.SandboxWarmPoolSpec{
		Replicas:           replicas,
		SandboxTemplateRef: p.Spec.SandboxTemplateRef,
		UpdateStrategy:     p.Spec.UpdateStrategy.DeepCopy(),
	}
	dst.Status = extv1beta1.SandboxWarmPoolStatus{
		Replicas:           p.Status.Replicas,
		ReadyReplicas:      p.Status.ReadyReplicas,
		Selector:           p.Status.Selector,
		ObservedGeneration: hub.ObservedGeneration,
	}
	return nil
}

// ConvertFrom converts the v1beta1 hub to this v1alpha1 pool; an unset
// replicas is 1, the v1beta1 default.
func (p *SandboxWarmPool) ConvertFrom(srcRaw conversion.Hub) error {
	src, ok := srcRaw.(*extv1beta1.SandboxWarmPool)
	if !ok {
		return fmt.Errorf("converting to v1alpha1 SandboxWarmPool: unexpected hub type %T", srcRaw)
	}
	meta := src.ObjectMeta.DeepCopy()
	convstate.Drop(&meta.Annotations, SandboxWarmPoolStateAnnotation)
	convstate.Drop(&meta.Annotations, SandboxWarmPoolHubStateAnnotation)
	p.ObjectMeta = *meta
	p.Spec = SandboxWarmPoolSpec{
		Replicas:           src.DesiredReplicas(),
		SandboxTemplateRef: src.Spec.SandboxTemplateRef,
		UpdateStrategy:     src.Spec.UpdateStrategy.DeepCopy(),
	}
	p.Status = SandboxWarmPoolStatus{
		Replicas:      src.Status.Replicas,
		ReadyReplicas: src.Status.ReadyReplicas,
		Selector:      src.Status.Selector,
	}
	hub := warmPoolHubState{ObservedGeneration: src.Status.ObservedGeneration, ReplicasUnset: src.Spec.Replicas == nil}
	if hub != (warmPoolHubState{}) {
		if err := convstate.Put(&p.Annotations, SandboxWarmPoolHubStateAnnotation, hub); err != nil {
			return fmt.Errorf("converting SandboxWarmPool %s/%s to v1alpha1: %w", src.Namespace, src.Name, err)
		}
	}
	return nil
}
