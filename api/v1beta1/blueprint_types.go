package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
)

// PodMetadata is the subset of object metadata that a pod template carries:
// only labels and annotations are used.
type PodMetadata struct {
	// labels to put on the Pod.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations to put on the Pod.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// EmbeddedObjectMetadata is the metadata of an object embedded in a spec,
// such as a PersistentVolumeClaim template.
type EmbeddedObjectMetadata struct {
	// name of the embedded object. For a volume claim template it names the
	// pod volume and prefixes the claim name (<name>-<sandbox>).
	// +optional
	Name string `json:"name,omitempty"`

	// labels of the embedded object.
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// annotations of the embedded object.
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// PodTemplate describes the Pod that backs a Sandbox.
type PodTemplate struct {
	// spec of the Pod.
	// +required
	Spec corev1.PodSpec `json:"spec"`

	// metadata of the Pod; only labels and annotations are used.
	// +optional
	ObjectMeta PodMetadata `json:"metadata,omitempty"`
}

// PersistentVolumeClaimTemplate describes a PersistentVolumeClaim created for
// each Sandbox and mounted as a volume named after the template.
type PersistentVolumeClaimTemplate struct {
	// metadata of the claim; name is required in practice because it names
	// the pod volume and the claim.
	// +optional
	EmbeddedObjectMetadata `json:"metadata,omitempty"`

	// spec of the claim.
	// +required
	Spec corev1.PersistentVolumeClaimSpec `json:"spec"`
}

// SandboxBlueprint is the configuration shared by Sandbox and
// SandboxTemplate. It deliberately excludes the operating mode and the
// lifecycle, which belong to one Sandbox only.
//
// Any field added here must also be compared by the warm pool's staleness
// check, or template changes to it would never roll out.
type SandboxBlueprint struct {
	// podTemplate describes the Pod of the Sandbox.
	// +required
	PodTemplate PodTemplate `json:"podTemplate"`

	// volumeClaimTemplates lists PersistentVolumeClaims created per Sandbox.
	// They survive suspension and pod recreation.
	// +optional
	// +listType=atomic
	VolumeClaimTemplates []PersistentVolumeClaimTemplate `json:"volumeClaimTemplates,omitempty"`

	// service controls the headless Service named after the Sandbox.
	// true creates and keeps it; false deletes an owned one; unset creates
	// none but keeps reconciling one that already exists.
	// +optional
	Service *bool `json:"service,omitempty"`
}
