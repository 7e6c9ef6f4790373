package blueprint

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

// ApplySecureDefaults hardens a pod spec copied from tmpl into a
// Sandbox. Every rendering of a template applies it (Spec): pool members,
// claims' cold starts, the CLI's Sandboxes; a Sandbox a user writes without
// a template gets none of it.
//
//   - automountServiceAccountToken unset becomes false: agent code should not
//     reach the Kubernetes API with the pod's identity unless the template
//     asks for it (an explicit true is kept).
//   - Under the secure default NetworkPolicy, which blocks cluster DNS, a pod
//     without a DNS policy resolves through public resolvers instead.
//     Custom policies and Unmanaged templates keep their DNS untouched.
//   - Every container gets a hardened security context where the template
//     leaves one unset (see hardenSecurityContext).
func ApplySecureDefaults(tmpl *extv1beta1.SandboxTemplate, spec *corev1.PodSpec) {
	if spec.AutomountServiceAccountToken == nil {
		f := false
		spec.AutomountServiceAccountToken = &f
	}
	hardenSecurityContext(spec)
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

// hardenSecurityContext fills the security context fields the template
// leaves unset, field by field, so a template keeps every choice it states:
//
//   - pod seccompProfile RuntimeDefault (a container's own profile still
//     wins, as Kubernetes resolves container over pod);
//   - per container allowPrivilegeEscalation false (no_new_privs: setuid
//     binaries and file capabilities cannot raise privileges);
//   - per container capabilities.drop [ALL], when the template drops
//     nothing; capabilities it adds are kept, and the runtime applies them
//     after the drop.
//
// The project's images run as uid 1000 and need no capability, so drop ALL
// costs them nothing; a runtime that does (a root process that chowns, say)
// adds it back explicitly in its template.
//
// Privileged containers (possible only in namespaces exempt from the
// admission policy) are left alone: they get every capability anyway, and
// the apiserver refuses allowPrivilegeEscalation false next to privileged
// true or an added CAP_SYS_ADMIN. Windows pods are left alone too: the
// apiserver forbids these Linux fields when spec.os.name is windows.
func hardenSecurityContext(spec *corev1.PodSpec) {
	if spec.OS != nil && spec.OS.Name == corev1.Windows {
		return
	}
	if spec.SecurityContext == nil {
		spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	if spec.SecurityContext.SeccompProfile == nil {
		spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	}
	for i := range spec.InitContainers {
		hardenContainer(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		hardenContainer(&spec.Containers[i])
	}
}

func hardenContainer(c *corev1.Container) {
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	sc := c.SecurityContext
	if sc.Privileged != nil && *sc.Privileged {
		return
	}
	if sc.Capabilities == nil {
		sc.Capabilities = &corev1.Capabilities{}
	}
	if len(sc.Capabilities.Drop) == 0 {
		sc.Capabilities.Drop = []corev1.Capability{"ALL"}
	}
	if sc.AllowPrivilegeEscalation == nil && !addsSysAdmin(sc.Capabilities) {
		f := false
		sc.AllowPrivilegeEscalation = &f
	}
}

// addsSysAdmin reports whether caps adds CAP_SYS_ADMIN, under either
// spelling the container runtimes accept. With it, allowPrivilegeEscalation
// false would be refused by the apiserver (and would be a false promise).
func addsSysAdmin(caps *corev1.Capabilities) bool {
	for _, c := range caps.Add {
		if c == "SYS_ADMIN" || c == "CAP_SYS_ADMIN" {
			return true
		}
	}
	return false
}
