package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ShutdownPolicy says what happens to a Sandbox object when it expires. Its
// Pod and Service are torn down in every case.
// +kubebuilder:validation:Enum=Delete;Retain
type ShutdownPolicy string

const (
	// ShutdownPolicyDelete deletes the Sandbox at expiry.
	ShutdownPolicyDelete ShutdownPolicy = "Delete"
	// ShutdownPolicyRetain keeps the Sandbox with Ready=False/SandboxExpired.
	ShutdownPolicyRetain ShutdownPolicy = "Retain"
)

// OperatingMode is the desired state of a Sandbox.
// +kubebuilder:validation:Enum=Running;Suspended
type OperatingMode string

const (
	// OperatingModeRunning keeps a Pod running.
	OperatingModeRunning OperatingMode = "Running"
	// OperatingModeSuspended deletes the Pod and keeps Service and volumes.
	OperatingModeSuspended OperatingMode = "Suspended"
)

// Lifecycle holds the expiry settings of a Sandbox.
type Lifecycle struct {
	// shutdownTime is the absolute time at which the Sandbox expires.
	// Unset means it never expires.
	// +optional
	// +kubebuilder:validation:Format=date-time
	ShutdownTime *metav1.Time `json:"shutdownTime,omitempty"`

	// shutdownPolicy says what happens to the Sandbox object at expiry.
	// +optional
	// +default="Retain"
	ShutdownPolicy *ShutdownPolicy `json:"shutdownPolicy,omitempty"`
}

// SandboxSpec is the desired state of a Sandbox.
// +kubebuilder:validation:XValidation:rule="has(self.volumeClaimTemplates) == has(oldSelf.volumeClaimTemplates) && (!has(self.volumeClaimTemplates) || self.volumeClaimTemplates == oldSelf.volumeClaimTemplates)",message="volumeClaimTemplates is immutable"
type SandboxSpec struct {
	SandboxBlueprint `json:",inline"`

	Lifecycle `json:",inline"`

	// operatingMode is the desired state: Running keeps a Pod, Suspended
	// deletes it while keeping the Service and volumes.
	// +optional
	// +default="Running"
	OperatingMode OperatingMode `json:"operatingMode,omitempty"`
}

// SandboxStatus is the observed state of a Sandbox.
type SandboxStatus struct {
	// serviceFQDN is <service>.<namespace>.svc.<clusterDomain>, empty when
	// no Service is tracked.
	// +optional
	ServiceFQDN string `json:"serviceFQDN,omitempty"`

	// service is the name of the headless Service, or empty.
	// +optional
	Service string `json:"service,omitempty"`

	// conditions are Ready, Suspended, PodScheduled and Finished.
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// selector selects the Pod of this Sandbox.
	// +optional
	LabelSelector string `json:"selector,omitempty"`

	// podIPs are the IPs of the Pod owned by this Sandbox.
	// +optional
	PodIPs []string `json:"podIPs,omitempty"`

	// nodeName is the node the Pod runs on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`

	// memorySnapshot is set while a gVisor checkpoint of the Sandbox's Pod,
	// taken when it was suspended, waits to be restored (deep hibernation,
	// controller flag --deep-hibernation). An agent-sandbox extension: the
	// reference project has no such field.
	// +optional
	MemorySnapshot *MemorySnapshot `json:"memorySnapshot,omitempty"`
}

// MemorySnapshot records where a Sandbox's memory snapshot is stored.
type MemorySnapshot struct {
	// id names the snapshot in the node's store (the Sandbox's UID).
	// +required
	ID string `json:"id"`
	// nodeName is the node whose local store holds the snapshot; the
	// restoring Pod is placed there.
	// +required
	NodeName string `json:"nodeName"`
	// sizeBytes is the snapshot's size.
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// takenAt is when the checkpoint completed.
	// +required
	TakenAt metav1.Time `json:"takenAt"`
	// volume is the Sandbox volume (a volumeClaimTemplates name) that holds
	// the snapshot, in a hidden directory at its root: the snapshot lives
	// and dies with that PersistentVolumeClaim, and the restoring Pod is not
	// pinned to nodeName. Empty: the snapshot is in nodeName's local store.
	// +optional
	Volume string `json:"volume,omitempty"`
	// volumePath is where the node found that volume (for a path under the
	// kubelet's per-Pod directory, with the Pod UID as {pod-uid}).
	// +optional
	VolumePath string `json:"volumePath,omitempty"`
	// digest is the SHA-256 of the snapshot's manifest, which lists the
	// SHA-256 of every image file. A volume snapshot is restored only if it
	// matches (the volume is writable from inside the Sandbox).
	// +optional
	Digest string `json:"digest,omitempty"`
}

// Sandbox is an isolated, stateful, single-tenant workload: one Pod with a
// stable name, optional volumes and an optional headless Service.
//
// The name must be a DNS-1123 label. It is checked on create only: names
// are immutable, and objects created before the check must stay updatable.
//
// +kubebuilder:validation:XValidation:rule="oldSelf.hasValue() || (self.metadata.name.size() <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'))",optionalOldSelf=true,message="metadata.name must be a DNS-1123 label: at most 63 characters, lowercase letters, digits and '-', starting and ending with a letter or digit; the router and the Sandbox's Service address a Sandbox by its name as one DNS label"
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:resource:shortName=sandbox
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].status"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".status.conditions[?(@.type=='Ready')].reason"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +genclient
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

// SandboxList is a list of Sandboxes.
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

// IsSuspended reports whether the Sandbox is asked to be suspended.
func (s *Sandbox) IsSuspended() bool {
	return s.Spec.OperatingMode == OperatingModeSuspended
}

// EffectiveShutdownPolicy returns the shutdown policy, Retain when unset.
func (s *Sandbox) EffectiveShutdownPolicy() ShutdownPolicy {
	if s.Spec.ShutdownPolicy == nil || *s.Spec.ShutdownPolicy == "" {
		return ShutdownPolicyRetain
	}
	return *s.Spec.ShutdownPolicy
}
