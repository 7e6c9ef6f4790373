package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

// SandboxWarmPoolSpec is the desired state of a v1alpha1 warm pool.
type SandboxWarmPoolSpec struct {
	// replicas is the number of ready Sandboxes to keep.
	// +required
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas"`
	// sandboxTemplateRef names the template the pool's Sandboxes are made
	// from.
	// +required
	SandboxTemplateRef extv1beta1.SandboxTemplateRef `json:"sandboxTemplateRef"`
	// updateStrategy says how Sandboxes of an older template are handled.
	// +optional
	UpdateStrategy *extv1beta1.SandboxWarmPoolUpdateStrategy `json:"updateStrategy,omitempty"`
}

// SandboxWarmPoolStatus is the observed state of a v1alpha1 warm pool.
type SandboxWarmPoolStatus struct {
	// replicas counts the pool's non-terminating Sandboxes, ready or not.
	// +optional
	Replicas int32 `json:"replicas"`
	// readyReplicas counts those whose Ready condition is True.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// selector selects the pool's Sandboxes and their Pods.
	// +optional
	Selector string `json:"selector,omitempty"`
}

// SandboxWarmPool is the deprecated v1alpha1 form of SandboxWarmPool.
//
// The name must be a DNS-1123 label, as in v1beta1 (checked on create only).
//
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || (self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",optionalOldSelf=true,message="metadata.name must be a DNS-1123 label: at most 63 characters, lowercase letters, digits and '-', starting and ending with a letter or digit; the pool's Sandboxes are named after it (<pool>-<suffix>)"
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=swp
// +kubebuilder:printcolumn:name="Ready",type="integer",JSONPath=".status.readyReplicas"
// +kubebuilder:printcolumn:name="Desired",type="integer",JSONPath=".spec.replicas"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:deprecatedversion:warning="extensions.agents.x-k8s.io/v1alpha1 SandboxWarmPool is deprecated; use extensions.agents.x-k8s.io/v1beta1 SandboxWarmPool instead"
type SandboxWarmPool struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the pool.
	// +required
	Spec SandboxWarmPoolSpec `json:"spec"`
	// status is the observed state of the pool.
	// +optional
	Status SandboxWarmPoolStatus `json:"status,omitempty"`
}

// SandboxWarmPoolList is a list of v1alpha1 SandboxWarmPools.
//
// +kubebuilder:object:root=true
type SandboxWarmPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxWarmPool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SandboxWarmPool{}, &SandboxWarmPoolList{})
}
