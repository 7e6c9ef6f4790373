package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// Condition reasons that only the v1alpha1 documentation uses. The v1beta1
// controller emits PodTerminating instead.
const (
	// ReasonPodNotTerminated is deprecated; kept so v1alpha1 callers compile.
	ReasonPodNotTerminated = sandboxv1beta1.ReasonPodNotTerminated
)

// SandboxSpec is the desired state of a v1alpha1 Sandbox. The pod template,
// volume claim templates, service switch and lifecycle are the v1beta1 types
// (the schemas are identical); replicas stands where v1beta1 has
// operatingMode.
type SandboxSpec struct {
	sandboxv1beta1.SandboxBlueprint `json:",inline"`
	sandboxv1beta1.Lifecycle        `json:",inline"`

	// replicas is 1 to run the Sandbox's Pod and 0 to suspend it (the Pod
	// is deleted, Service and volumes are kept).
	// +optional
	// +default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	Replicas *int32 `json:"replicas,omitempty"`
}

// SandboxStatus is the observed state of a v1alpha1 Sandbox.
type SandboxStatus struct {
	// serviceFQDN is <service>.<namespace>.svc.<clusterDomain>, empty when
	// no Service is tracked.
	// +optional
	ServiceFQDN string `json:"serviceFQDN,omitempty"`
	// service is the name of the headless Service, or empty.
	// +optional
	Service string `json:"service,omitempty"`
	// replicas is 1 while the Sandbox is meant to run and 0 while it is
	// suspended (derived from the v1beta1 operating mode).
	// +optional
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas,omitempty"`
	// conditions are Ready, Suspended, PodScheduled and Finished.
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// selector selects the Pod of this Sandbox.
	// +optional
	LabelSelector string `json:"selector,omitempty"`
	// podIPs are the IPs of the Pod owned by this Sandbox.
	// +optional
	PodIPs []string `json:"podIPs,omitempty"`
}

// Sandbox is the deprecated v1alpha1 form of agents.x-k8s.io Sandbox.
//
// The name must be a DNS-1123 label, as in v1beta1 (checked on create only).
//
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || (self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",optionalOldSelf=true,message="metadata.name must be a DNS-1123 label: at most 63 characters, lowercase letters, digits and '-', starting and ending with a letter or digit; the router and the Sandbox's Service address a Sandbox by its name as one DNS label"
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=sandbox
// +kubebuilder:deprecatedversion:warning="agents.x-k8s.io/v1alpha1 Sandbox is deprecated; use agents.x-k8s.io/v1beta1 Sandbox instead"
type Sandbox struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Sandbox.
	// +required
	Spec SandboxSpec `json:"spec"`
	// status is the observed state of the Sandbox.
	// +optional
	Status SandboxStatus `json:"status,omitempty"`
}

// SandboxList is a list of v1alpha1 Sandboxes.
//
// +kubebuilder:object:root=true
type SandboxList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sandbox `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Sandbox{}, &SandboxList{})
}
