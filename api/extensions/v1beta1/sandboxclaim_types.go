package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// ClaimShutdownPolicy says what happens when a claim expires.
// +kubebuilder:validation:Enum=Delete;DeleteForeground;Retain
type ClaimShutdownPolicy string

const (
	// ClaimShutdownPolicyDelete deletes the claim; its Sandbox goes by
	// garbage collection in the background.
	ClaimShutdownPolicyDelete ClaimShutdownPolicy = "Delete"
	// ClaimShutdownPolicyDeleteForeground deletes the claim with foreground
	// propagation: the claim stays until its Sandbox and Pod are gone.
	ClaimShutdownPolicyDeleteForeground ClaimShutdownPolicy = "DeleteForeground"
	// ClaimShutdownPolicyRetain deletes the Sandbox and keeps the claim with
	// Ready=False/ClaimExpired.
	ClaimShutdownPolicyRetain ClaimShutdownPolicy = "Retain"
)

// Condition reasons of a SandboxClaim, besides those forwarded from its
// Sandbox.
const (
	ClaimReasonSandboxNotReady           = "SandboxNotReady"
	ClaimReasonSandboxMissing            = "SandboxMissing"
	ClaimReasonSandboxExpired            = "SandboxExpired"
	ClaimReasonClaimExpired              = "ClaimExpired"
	ClaimReasonTemplateNotFound          = "TemplateNotFound"
	ClaimReasonWarmPoolNotFound          = "WarmPoolNotFound"
	ClaimReasonAdoptionConflict          = "AdoptionConflict"
	ClaimReasonSandboxCreatePending      = "SandboxCreatePending"
	ClaimReasonInvalidMetadata           = "InvalidMetadata"
	ClaimReasonEnvVarsInjectionRejected  = "EnvVarsInjectionRejected"
	ClaimReasonVolumeClaimTemplatesError = "VolumeClaimTemplatesError"
	ClaimReasonReconcilerError           = "ReconcilerError"
	// ClaimReasonEnvDeliveryPending: a warm Sandbox was adopted and the
	// claim's env is not yet confirmed applied by its sandboxd (retried
	// with backoff). An extension of this project.
	ClaimReasonEnvDeliveryPending = "EnvDeliveryPending"
)

// ClaimConditionLateBinding reports how a claim with env got it, an
// extension of this project: True/EnvApplied when it was delivered to a
// warm Sandbox's sandboxd, False/LateBindingUnavailable (with the reason in
// the message) when the claim fell back to a cold start because the
// template cannot take late-bound env or no warm member has shown sandboxd
// with the controller's key, False/EnvDeliveryFailed when the adopted warm
// Sandbox did not take the env in time and the claim went cold.
const (
	ClaimConditionLateBinding         = "LateBinding"
	ClaimReasonEnvApplied             = "EnvApplied"
	ClaimReasonLateBindingUnavailable = "LateBindingUnavailable"
	// ClaimReasonEnvDeliveryFailed: the env could not be delivered to the
	// adopted warm Sandbox within the delivery deadline; the controller
	// deleted that Sandbox and started a cold one with the env in its Pod
	// spec.
	ClaimReasonEnvDeliveryFailed = "EnvDeliveryFailed"
)

// WarmPoolRef names a SandboxWarmPool in the same namespace.
type WarmPoolRef struct {
	// name of the SandboxWarmPool.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// Lifecycle holds the expiry settings of a claim.
type Lifecycle struct {
	// shutdownTime is the absolute time at which the claim expires. It is
	// enforced by the claim controller and not copied to the Sandbox.
	// +optional
	// +kubebuilder:validation:Format=date-time
	ShutdownTime *metav1.Time `json:"shutdownTime,omitempty"`

	// ttlSecondsAfterFinished expires the claim this many seconds after its
	// Sandbox finished.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TTLSecondsAfterFinished *int32 `json:"ttlSecondsAfterFinished,omitempty"`

	// shutdownPolicy says what happens at expiry.
	// +optional
	// +default="Retain"
	ShutdownPolicy ClaimShutdownPolicy `json:"shutdownPolicy,omitempty"`
}

// EnvVar is an environment variable a claim injects into its Sandbox.
// +kubebuilder:validation:XValidation:rule="!has(self.valueFrom) || size(self.value) == 0",message="value must be empty when valueFrom is set"
type EnvVar struct {
	// name of the variable.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// value of the variable.
	// +required
	Value string `json:"value"`

	// containerName is the target container; empty means the first regular
	// container.
	// +optional
	ContainerName string `json:"containerName,omitempty"`

	// valueFrom takes the value from a key of a Secret in the claim's
	// namespace instead of Value (which must then be empty). The Secret
	// must opt in with the annotation
	// extensions.agents.x-k8s.io/claim-env-allowed: "true". The controller
	// resolves it when it delivers late-bound env (the value is never
	// written into the Sandbox, the Pod or any status); a cold Sandbox gets
	// a secretKeyRef in its Pod spec. An extension of this project.
	// +optional
	ValueFrom *EnvVarSource `json:"valueFrom,omitempty"`
}

// EnvVarSource is where a claim's env value comes from.
type EnvVarSource struct {
	// secretKeyRef selects a key of a Secret in the claim's namespace.
	// +required
	SecretKeyRef *SecretKeySelector `json:"secretKeyRef"`
}

// SecretKeySelector names a key of a Secret in the claim's namespace.
type SecretKeySelector struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// key in the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// ClaimEnvAllowedAnnotation on a Secret lets claims in its namespace take
// env values from it (EnvVar.ValueFrom). Only those who can write the
// Secret can set it.
const ClaimEnvAllowedAnnotation = "extensions.agents.x-k8s.io/claim-env-allowed"

// SandboxClaimSpec is the desired state of a claim.
type SandboxClaimSpec struct {
	// warmPoolRef names the pool to take a Sandbox from; the template is the
	// pool's.
	// +required
	WarmPoolRef WarmPoolRef `json:"warmPoolRef"`

	// lifecycle holds the expiry settings of the claim.
	// +optional
	Lifecycle *Lifecycle `json:"lifecycle,omitempty"`

	// additionalPodMetadata is merged into the Sandbox's pod template
	// metadata; it cannot override template values.
	// +optional
	AdditionalPodMetadata sandboxv1beta1.PodMetadata `json:"additionalPodMetadata,omitempty"`

	// env injects environment variables, if the template allows it.
	// +optional
	// +listType=atomic
	Env []EnvVar `json:"env,omitempty"`

	// volumeClaimTemplates adds or replaces volume claim templates, if the
	// template allows it.
	// +optional
	// +listType=atomic
	VolumeClaimTemplates []sandboxv1beta1.PersistentVolumeClaimTemplate `json:"volumeClaimTemplates,omitempty"`
}

// SandboxStatus names the Sandbox bound to a claim.
type SandboxStatus struct {
	// name of the bound Sandbox.
	// +optional
	Name string `json:"name,omitempty"`

	// podIPs of the bound Sandbox.
	// +optional
	PodIPs []string `json:"podIPs,omitempty"`
}

// SandboxClaimStatus is the observed state of a claim.
type SandboxClaimStatus struct {
	// conditions are Ready, and Finished mirrored from the Sandbox.
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// sandbox names the bound Sandbox.
	// +optional
	SandboxStatus SandboxStatus `json:"sandbox,omitempty"`
}

// SandboxClaim asks for a Sandbox from a warm pool.
//
// The name must be a DNS-1123 label. It is checked on create only: names
// are immutable, and objects created before the check must stay updatable.
//
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || (self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",optionalOldSelf=true,message="metadata.name must be a DNS-1123 label: at most 63 characters, lowercase letters, digits and '-', starting and ending with a letter or digit; a claim without a warm Sandbox gets a new Sandbox named after it"
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:shortName=sandboxclaim
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Sandbox",type="string",JSONPath=".status.sandbox.name"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].reason"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +genclient
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
	Status SandboxClaimStatus `json:"status,omitempty"`
}

// SandboxClaimList is a list of SandboxClaims.
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

// EffectiveShutdownPolicy returns the lifecycle shutdown policy, Retain when
// unset.
func (c *SandboxClaim) EffectiveShutdownPolicy() ClaimShutdownPolicy {
	if c.Spec.Lifecycle == nil || c.Spec.Lifecycle.ShutdownPolicy == "" {
		return ClaimShutdownPolicyRetain
	}
	return c.Spec.Lifecycle.ShutdownPolicy
}
