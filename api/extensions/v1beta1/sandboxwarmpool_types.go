package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// UpdateStrategyType says how a warm pool handles Sandboxes made from an
// older version of its template.
// +kubebuilder:validation:Enum=Recreate;OnReplenish
type UpdateStrategyType string

const (
	// RecreateUpdateStrategyType deletes stale unclaimed Sandboxes at once.
	RecreateUpdateStrategyType UpdateStrategyType = "Recreate"
	// OnReplenishUpdateStrategyType keeps stale Sandboxes until they are
	// claimed or deleted; replacements use the new template.
	OnReplenishUpdateStrategyType UpdateStrategyType = "OnReplenish"
)

// SandboxTemplateRef names a SandboxTemplate in the same namespace.
type SandboxTemplateRef struct {
	// name of the SandboxTemplate.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// SandboxWarmPoolUpdateStrategy holds the rollout settings of a pool.
type SandboxWarmPoolUpdateStrategy struct {
	// type of the strategy.
	// +optional
	// +default="OnReplenish"
	Type UpdateStrategyType `json:"type,omitempty"`
}

// SandboxWarmPoolSpec is the desired state of a warm pool.
type SandboxWarmPoolSpec struct {
	// replicas is the number of ready Sandboxes to keep. Driven by an HPA
	// through the scale subresource.
	// +optional
	// +default=1
	// +kubebuilder:validation:Minimum=0
	Replicas *int32 `json:"replicas,omitempty"`

	// sandboxTemplateRef names the template the pool's Sandboxes are made
	// from.
	// +required
	SandboxTemplateRef SandboxTemplateRef `json:"sandboxTemplateRef"`

	// updateStrategy says how Sandboxes of an older template are handled.
	// +optional
	UpdateStrategy *SandboxWarmPoolUpdateStrategy `json:"updateStrategy,omitempty"`
}

// SandboxWarmPoolStatus is the observed state of a warm pool.
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

	// observedGeneration is the pool generation this status is for.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// SandboxWarmPool keeps a number of ready Sandboxes made from a template so
// that claims are served without waiting for a Pod to start.
//
// The name must be a DNS-1123 label. It is checked on create only: names
// are immutable, and objects created before the check must stay updatable.
//
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || (self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",optionalOldSelf=true,message="metadata.name must be a DNS-1123 label: at most 63 characters, lowercase letters, digits and '-', starting and ending with a letter or digit; the pool's Sandboxes are named after it (<pool>-<suffix>)"
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:storageversion
// +kubebuilder:resource:shortName=swp
// +kubebuilder:printcolumn:name="Ready",type="integer",JSONPath=".status.readyReplicas"
// +kubebuilder:printcolumn:name="Desired",type="integer",JSONPath=".spec.replicas"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +genclient
// +genclient:method=GetScale,verb=get,subresource=scale,result=k8s.io/api/autoscaling/v1.Scale
// +genclient:method=UpdateScale,verb=update,subresource=scale,input=k8s.io/api/autoscaling/v1.Scale,result=k8s.io/api/autoscaling/v1.Scale
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

// SandboxWarmPoolList is a list of SandboxWarmPools.
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

// DesiredReplicas returns spec.replicas, 1 when unset.
func (p *SandboxWarmPool) DesiredReplicas() int32 {
	if p.Spec.Replicas == nil {
		return 1
	}
	return *p.Spec.Replicas
}

// Strategy returns the update strategy, OnReplenish when unset or unknown.
func (p *SandboxWarmPool) Strategy() UpdateStrategyType {
	if p.Spec.UpdateStrategy != nil && p.Spec.UpdateStrategy.Type == RecreateUpdateStrategyType {
		return RecreateUpdateStrategyType
	}
	return OnReplenishUpdateStrategyType
}
