// Package v1alpha1 holds the deprecated agents.x-k8s.io/v1alpha1 API of the
// Sandbox kind. It is served so that manifests and clients written for the
// older API keep working; objects are stored as v1beta1 (the conversion hub)
// and converted by the controller's webhook. Prefer v1beta1 for new code.
//
// +kubebuilder:object:generate=true
// +groupName=agents.x-k8s.io
package v1alpha1
