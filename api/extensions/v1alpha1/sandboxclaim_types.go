package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// Warm pool policies of a v1alpha1 claim; any other value names a pool.
const (
	// WarmPoolPolicyNone asks for a cold start from the template.
	WarmPoolPolicyNone = "none"
	// WarmPoolPolicyDefault takes a Sandbox from any pool of the template,
	// else starts one cold.
	WarmPoolPolicyDefault = "default"
)

// SandboxTemplateRef names a SandboxTemplate in the same namespace.
type SandboxTemplateRef struct {
	// name of the SandboxTemplate.
	// +required
	Name string `json:"name"`
}

// SandboxClaimSpec is the desired state of a v1alpha1 claim: a template and
// a warm pool policy.
type SandboxClaimSpec struct {
	// sandboxTemplateRef names the template of the Sandbox.
	// +required
	SandboxTemplateRef SandboxTemplateRef `json:"sandboxTemplateRef"`
	// warmpool is "none" (cold start), "default" (any pool of the
	// template) or the name of a SandboxWarmPool.
	// +optional
	// +default="default"
	WarmPool string `json:"warmpool,omitempty"`
	// lifecycle holds the expiry settings of the claim.
	// +optional
	Lifecycle *extv1beta1.Lifecycle `json:"lifecycle,omitempty"`
	// additionalPodMetadata is merged into the Sandbox's pod template
	// metadata.
	// +optional
	AdditionalPodMetadata sandboxv1beta1.PodMetadata `json:"additionalPodMetadata,omitempty"`
	// env injects environment variables, if the template allows it.
	// +optional
	// +listType=atomic
	Env []extv1beta1.EnvVar `json:"env,omitempty"`
}

// SandboxClaim is the deprecated v1alpha1 form of SandboxClaim.
//
// The name must be a DNS-1123 label, as in v1beta1 (checked on create only).
//
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || (self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",optionalOldSelf=true,message="metadata.name must be a DNS-1123 label: at most 63 characters, lowercase letters, digits and '-', starting and ending with a letter or digit; a claim without a warm Sandbox gets a new Sandbox named after it"
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sandboxclaim
// +kubebuilder:deprecatedversion:warning="extensions.agents.x-k8s.io/v1alpha1 SandboxClaim is deprecated; use extensions.agents.x-k8s.io/v1beta1 SandboxClaim instead"
type SandboxClaim struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the claim.
	// +required
	Spec SandboxClaimSpec `json:"spec"`
	// status is the observed state of the claim.
	// +optional
	Status extv1beta1.SandboxClaimStatus `json:"status,omitempty"`
}

// SandboxClaimList is a list of v1alpha1 SandboxClaims.
//
// +kubebuilder:object:root=true
type SandboxClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SandboxClaim `json:"items"`
}

func init() {
	SchemeBuilder.Register(&SandboxClaim{}, &SandboxClaimList{})
}
