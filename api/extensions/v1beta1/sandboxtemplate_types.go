package v1beta1

import (
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// SandboxIDLabel carries the UID of the claim that owns a Sandbox.
const SandboxIDLabel = "agents.x-k8s.io/claim-uid"

// NetworkPolicyManagement says whether the template controller manages the
// shared NetworkPolicy of a template.
// +kubebuilder:validation:Enum=Managed;Unmanaged
type NetworkPolicyManagement string

const (
	// NetworkPolicyManagementManaged keeps one shared NetworkPolicy per
	// template, secure by default.
	NetworkPolicyManagementManaged NetworkPolicyManagement = "Managed"
	// NetworkPolicyManagementUnmanaged creates none and deletes one the
	// controller owns.
	NetworkPolicyManagementUnmanaged NetworkPolicyManagement = "Unmanaged"
)

// EnvVarsInjectionPolicy says whether claims may set environment variables.
// +kubebuilder:validation:Enum=Allowed;Overrides;Disallowed
type EnvVarsInjectionPolicy string

const (
	// EnvVarsInjectionPolicyAllowed lets claims add variables the template
	// does not define.
	EnvVarsInjectionPolicyAllowed EnvVarsInjectionPolicy = "Allowed"
	// EnvVarsInjectionPolicyOverrides also lets claims replace template
	// variables.
	EnvVarsInjectionPolicyOverrides EnvVarsInjectionPolicy = "Overrides"
	// EnvVarsInjectionPolicyDisallowed refuses claims that set variables.
	EnvVarsInjectionPolicyDisallowed EnvVarsInjectionPolicy = "Disallowed"
)

// VolumeClaimTemplatesPolicy says whether claims may add or replace volume
// claim templates.
// +kubebuilder:validation:Enum=Disallowed;Allowed;Overrides
type VolumeClaimTemplatesPolicy string

const (
	// VolumeClaimTemplatesPolicyDisallowed refuses claim volume templates.
	VolumeClaimTemplatesPolicyDisallowed VolumeClaimTemplatesPolicy = "Disallowed"
	// VolumeClaimTemplatesPolicyAllowed lets claims add new templates.
	VolumeClaimTemplatesPolicyAllowed VolumeClaimTemplatesPolicy = "Allowed"
	// VolumeClaimTemplatesPolicyOverrides also lets claims replace templates
	// of the same name.
	VolumeClaimTemplatesPolicyOverrides VolumeClaimTemplatesPolicy = "Overrides"
)

// NetworkPolicySpec holds the custom rules of the shared NetworkPolicy of a
// template. The pod selector and policy types are set by the controller and
// cannot be changed; an empty list denies all traffic in that direction.
type NetworkPolicySpec struct {
	// ingress rules.
	// +optional
	// +listType=atomic
	Ingress []networkingv1.NetworkPolicyIngressRule `json:"ingress,omitempty"`

	// egress rules.
	// +optional
	// +listType=atomic
	Egress []networkingv1.NetworkPolicyEgressRule `json:"egress,omitempty"`
}

// SandboxTemplateSpec is a reusable Sandbox blueprint plus the policies that
// govern Sandboxes made from it.
type SandboxTemplateSpec struct {
	sandboxv1beta1.SandboxBlueprint `json:",inline"`

	// networkPolicy holds custom rules for the shared NetworkPolicy. Unset
	// means the secure default. Ignored when networkPolicyManagement is
	// Unmanaged.
	// +optional
	NetworkPolicy *NetworkPolicySpec `json:"networkPolicy,omitempty"`

	// networkPolicyManagement says whether the controller manages the shared
	// NetworkPolicy.
	// +optional
	// +default="Managed"
	NetworkPolicyManagement NetworkPolicyManagement `json:"networkPolicyManagement,omitempty"`

	// envVarsInjectionPolicy says whether claims may set environment
	// variables.
	// +optional
	// +default="Disallowed"
	EnvVarsInjectionPolicy EnvVarsInjectionPolicy `json:"envVarsInjectionPolicy,omitempty"`

	// volumeClaimTemplatesPolicy says whether claims may add or replace
	// volume claim templates.
	// +optional
	// +default="Disallowed"
	VolumeClaimTemplatesPolicy VolumeClaimTemplatesPolicy `json:"volumeClaimTemplatesPolicy,omitempty"`
}

// SandboxTemplate is a reusable blueprint for Sandboxes.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:resource:shortName=sandboxtemplate
// +genclient
// +genclient:noStatus
type SandboxTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the template.
	// +required
	Spec SandboxTemplateSpec `json:"spec"`
}

// SandboxTemplateList is a list of SandboxTemplates.
//
// +kubebuilder:object:root=true
type SandboxTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxTemplate `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SandboxTemplate{}, &SandboxTemplateList{})
}
