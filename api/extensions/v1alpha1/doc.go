// Package v1alpha1 holds the deprecated extensions.agents.x-k8s.io/v1alpha1
// API: SandboxTemplate, SandboxWarmPool and SandboxClaim as they were before
// v1beta1. It is served so existing manifests and clients keep working;
// objects are stored as v1beta1 (the conversion hub) and converted by the
// controller's webhook. The notable difference is the claim: v1alpha1 names a
// template plus a warm pool policy, v1beta1 names a warm pool only.
//
// +kubebuilder:object:generate=true
// +groupName=extensions.agents.x-k8s.io
package v1alpha1
