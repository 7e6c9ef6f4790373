package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// SandboxTemplateSpec is a reusable Sandbox blueprint plus the policies that
// govern Sandboxes made from it. It is the v1beta1 spec without
// volumeClaimTemplatesPolicy.
type SandboxTemplateSpec struct {
	sandboxv1beta1.SandboxBlueprint `json:",inline"`

	// networkPolicy holds custom rules for the shared NetworkPolicy. Unset
	// means the secure default.
	// +optional
	NetworkPolicy *extv1beta1.NetworkPolicySpec `json:"networkPolicy,omitempty"`
	// networkPolicyManagement says whether the controller manages the shared
	// NetworkPolicy.
	// +optional
	// +default="Managed"
	NetworkPolicyManagement extv1beta1.NetworkPolicyManagement `json:"networkPolicyManagement,omitempty"`
	// envVarsInjectionPolicy says whether claims may set environment
	// variables.
	// +optional
	// +default="Disallowed"
	EnvVarsInjectionPolicy extv1beta1.EnvVarsInjectionPolicy `json:"envVarsInjectionPolicy,omitempty"`
}

// SandboxTemplate is the deprecated v1alpha1 form of SandboxTemplate.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=sandboxtemplate
// +kubebuilder:deprecatedversion:warning="extensions.agents.x-k8s.io/v1alpha1 SandboxTemplate is deprecated; use extensions.agents.x-k8s.io/v1beta1 SandboxTemplate instead"
type SandboxTemplate struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec of the template.
	// +required
	Spec SandboxTemplateSpec `json:"spec"`
}

// SandboxTemplateList is a list of v1alpha1 SandboxTemplates.
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
