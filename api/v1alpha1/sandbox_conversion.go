package v1alpha1

import (
	"fmt"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/conversion"

	"sigs.k8s.io/agent-sandbox/api/internal/convstate"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

const (
	// SandboxStateAnnotation is set on a v1beta1 Sandbox converted from
	// v1alpha1 when it holds v1alpha1 fields v1beta1 cannot represent (a
	// JSON v1alpha1 Sandbox with just those fields). The reference
	// implementation stores the whole v1alpha1 object under this key; both
	// forms decode the same way.
	SandboxStateAnnotation = "api.agents.x-k8s.io/v1alpha1-sandbox-state"
	// SandboxHubStateAnnotation is set on a v1alpha1 Sandbox converted from
	// v1beta1 when the v1beta1 object has fields v1alpha1 cannot represent,
	// so that writing the v1alpha1 object back loses nothing.
	SandboxHubStateAnnotation = "api.agents.x-k8s.io/v1beta1-sandbox-state"
)

// sandboxHubState is what a v1alpha1 Sandbox carries of its v1beta1 form.
type sandboxHubState struct {
	NodeName string `json:"nodeName,omitempty"`
	// operatingModeUnset records an empty operatingMode (never stored by the
	// apiserver, which defaults it, but possible in memory).
	OperatingModeUnset bool `json:"operatingModeUnset,omitempty"`
	// memorySnapshot is v1beta1's status.memorySnapshot (deep hibernation).
	MemorySnapshot *sandboxv1beta1.MemorySnapshot `json:"memorySnapshot,omitempty"`
}

var _ conversion.Convertible = &Sandbox{}

// ConvertTo converts this v1alpha1 Sandbox to the v1beta1 hub: replicas 0
// is Suspended, anything else (nil or 1) is Running.
func (s *Sandbox) ConvertTo(dstRaw conversion.Hub) error {
	dst, ok := dstRaw.(*sandboxv1beta1.Sandbox)
	if !ok {
		return fmt.Errorf("converting v1alpha1 Sandbox: unexpected hub type %T", dstRaw)
	}
	meta := s.ObjectMeta.DeepCopy()
	var hub sandboxHubState
	if _, err := convstate.Take(&meta.Annotations, SandboxHubStateAnnotation, &hub); err != nil {
		return fmt.Errorf("converting Sandbox %s/%s to v1beta1: %w", s.Namespace, s.Name, err)
	}
	// A v1alpha1 object never carries its own state forward.
	convstate.Drop(&meta.Annotations, SandboxStateAnnotation)

	dst.ObjectMeta = *meta
	dst.Spec = sandboxv1beta1.SandboxSpec{
		SandboxBlueprint: *s.Spec.SandboxBlueprint.DeepCopy(),
		Lifecycle:        *s.Spec.Lifecycle.DeepCopy(),
		OperatingMode:    ReplicasToOperatingMode(s.Spec.Replicas),
	}
	if hub.OperatingModeUnset && dst.Spec.OperatingMode == sandboxv1beta1.OperatingModeRunning {
		dst.Spec.OperatingMode = ""
	}
	st := s.Status.DeepCopy()
	dst.Status = sandboxv1beta1.SandboxStatus{
		ServiceFQDN:    st.ServiceFQDN,
		Service:        st.Service,
		Conditions:     st.Conditions,
		LabelSelector:  st.LabelSelector,
		PodIPs:         st.PodIPs,
		NodeName:       hub.NodeName,
		MemorySnapshot: hub.MemorySnapshot,
	}
	return nil
}

// ConvertFrom converts the v1beta1 hub to this v1alpha1 Sandbox: Suspended
// is replicas 0, anything else 1.
func (s *Sandbox) ConvertFrom(srcRaw conversion.Hub) error {
	src, ok := srcRaw.(*sandboxv1beta1.Sandbox)
	if !ok {
		return fmt.Errorf("converting to v1alpha1 Sandbox: unexpected hub type %T", srcRaw)
	}
	meta := src.ObjectMeta.DeepCopy()
	var orig Sandbox
	found, err := convstate.Take(&meta.Annotations, SandboxStateAnnotation, &orig)
	if err != nil {
		// The state is advisory and any v1beta1 writer can set it; a bad
		// value must not make the object unreadable as v1alpha1.
		found = false
	}
	convstate.Drop(&meta.Annotations, SandboxHubStateAnnotation)

	replicas := OperatingModeToReplicas(src.Spec.OperatingMode)
	if found && replicas == 1 && orig.Spec.Replicas != nil && *orig.Spec.Replicas != 0 {
		replicas = *orig.Spec.Replicas
	}
	s.ObjectMeta = *meta
	s.Spec = SandboxSpec{
		SandboxBlueprint: *src.Spec.SandboxBlueprint.DeepCopy(),
		Lifecycle:        *src.Spec.Lifecycle.DeepCopy(),
		Replicas:         ptr.To(replicas),
	}
	st := src.Status.DeepCopy()
	// status.replicas follows the hub's mode rather than a stored value: the
	// controller writes status in v1beta1 only, so a stored value would be
	// stale from the first status update on.
	s.Status = SandboxStatus{
		ServiceFQDN:   st.ServiceFQDN,
		Service:       st.Service,
		Replicas:      OperatingModeToReplicas(src.Spec.OperatingMode),
		Conditions:    st.Conditions,
		LabelSelector: st.LabelSelector,
		PodIPs:        st.PodIPs,
	}
	hub := sandboxHubState{NodeName: st.NodeName, OperatingModeUnset: src.Spec.OperatingMode == "", MemorySnapshot: st.MemorySnapshot}
	if hub != (sandboxHubState{}) {
		if err := convstate.Put(&s.Annotations, SandboxHubStateAnnotation, hub); err != nil {
			return fmt.Errorf("converting Sandbox %s/%s to v1alpha1: %w", src.Namespace, src.Name, err)
		}
	}
	return nil
}

// ReplicasToOperatingMode maps v1alpha1 spec.replicas to the v1beta1 mode:
// 0 suspends, nil (defaulted to 1) and 1 run.
func ReplicasToOperatingMode(replicas *int32) sandboxv1beta1.OperatingMode {
	if replicas != nil && *replicas == 0 {
		return sandboxv1beta1.OperatingModeSuspended
	}
	return sandboxv1beta1.OperatingModeRunning
}

// OperatingModeToReplicas maps the v1beta1 mode to v1alpha1 replicas:
// Suspended is 0, Running and the unset mode (which defaults to Running) 1.
func OperatingModeToReplicas(mode sandboxv1beta1.OperatingMode) int32 {
	if mode == sandboxv1beta1.OperatingModeSuspended {
		return 0
	}
	return 1
}
