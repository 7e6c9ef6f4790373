package template

import (
	corev1 "k8s.io/api/core/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

// PublicNameservers are the resolvers template pods use under the secure
// default NetworkPolicy, which blocks in-cluster DNS along with every other
// private address.
var PublicNameservers = []string{"8.8.8.8", "1.1.1.1"}

// IsManaged reports whether the template controller maintains the shared
// NetworkPolicy of tmpl (Managed, or the field left empty).
func IsManaged(tmpl *extv1beta1.SandboxTemplate) bool {
	m := tmpl.Spec.NetworkPolicyManagement
	return m == "" || m == extv1beta1.NetworkPolicyManagementManaged
}

// UsesSecureDefaultPolicy reports whether pods of tmpl run under the secure
// default NetworkPolicy (managed, no custom rules).
func UsesSecureDefaultPolicy(tmpl *extv1beta1.SandboxTemplate) bool {
	return IsManaged(tmpl) && tmpl.Spec.NetworkPolicy == nil
}

// ApplySandboxSecureDefaults hardens a pod spec copied from tmpl into a
// Sandbox. The warm pool and claim controllers call it for every Sandbox they
// derive from a template; Sandboxes created directly get none of it.
//
//   - automountServiceAccountToken unset becomes false: agent code should not
//     reach the Kubernetes API with the pod's identity unless the template
//     asks for it (an explicit true is kept).
//   - Under the secure default NetworkPolicy, which blocks cluster DNS, a pod
//     without a DNS policy resolves through public resolvers instead.
//     Custom policies and Unmanaged templates keep their DNS untouched.
func ApplySandboxSecureDefaults(tmpl *extv1beta1.SandboxTemplate, spec *corev1.PodSpec) {
	if spec.AutomountServiceAccountToken == nil {
		f := false
		spec.AutomountServiceAccountToken = &f
	}
	if !UsesSecureDefaultPolicy(tmpl) || spec.DNSPolicy != "" {
		return
	}
	spec.DNSPolicy = corev1.DNSNone
	if spec.DNSConfig == nil {
		spec.DNSConfig = &corev1.PodDNSConfig{}
	}
	if len(spec.DNSConfig.Nameservers) == 0 {
		spec.DNSConfig.Nameservers = append([]string(nil), PublicNameservers...)
	}
}
