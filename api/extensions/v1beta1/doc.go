// Package v1beta1 holds the extensions.agents.x-k8s.io/v1beta1 API:
// SandboxTemplate (a reusable Sandbox blueprint), SandboxWarmPool (a pool of
// ready Sandboxes made from a template) and SandboxClaim (a request for a
// Sandbox from a pool). Field names, defaults and validation match the
// published API so existing manifests apply unchanged.
//
// +kubebuilder:object:generate=true
// +groupName=extensions.agents.x-k8s.io
package v1beta1
