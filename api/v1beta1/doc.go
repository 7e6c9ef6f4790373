// Package v1beta1 holds the agents.x-k8s.io/v1beta1 API: the Sandbox kind and
// the blueprint types that SandboxTemplate shares with it. Field names, JSON
// names, defaults and validation match the published agents.x-k8s.io API so
// existing manifests apply unchanged.
//
// +kubebuilder:object:generate=true
// +groupName=agents.x-k8s.io
package v1beta1
