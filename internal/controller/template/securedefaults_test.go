package template

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
)

func TestApplySandboxSecureDefaults(t *testing.T) {
	publicDNS := &corev1.PodDNSConfig{Nameservers: []string{"8.8.8.8", "1.1.1.1"}}
	custom := &extv1beta1.NetworkPolicySpec{}
	cases := []struct {
		name      string
		mgmt      extv1beta1.NetworkPolicyManagement
		policy    *extv1beta1.NetworkPolicySpec
		in        corev1.PodSpec
		automount *bool
		dnsPolicy corev1.DNSPolicy
		dnsConfig *corev1.PodDNSConfig
	}{
		{name: "managed default: automount off, public DNS", in: corev1.PodSpec{},
			automount: ptr.To(false), dnsPolicy: corev1.DNSNone, dnsConfig: publicDNS},
		{name: "explicit Managed behaves like empty", mgmt: extv1beta1.NetworkPolicyManagementManaged, in: corev1.PodSpec{},
			automount: ptr.To(false), dnsPolicy: corev1.DNSNone, dnsConfig: publicDNS},
		{name: "explicit automount true is kept", in: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(true)},
			automount: ptr.To(true), dnsPolicy: corev1.DNSNone, dnsConfig: publicDNS},
		{name: "custom policy leaves DNS alone", policy: custom, in: corev1.PodSpec{},
			automount: ptr.To(false)},
		{name: "unmanaged leaves DNS alone", mgmt: extv1beta1.NetworkPolicyManagementUnmanaged, in: corev1.PodSpec{},
			automount: ptr.To(false)},
		{name: "template DNS policy wins", in: corev1.PodSpec{DNSPolicy: corev1.DNSDefault},
			automount: ptr.To(false), dnsPolicy: corev1.DNSDefault},
		{name: "existing dnsConfig options kept, nameservers added", in: corev1.PodSpec{DNSConfig: &corev1.PodDNSConfig{Searches: []string{"x"}}},
			automount: ptr.To(false), dnsPolicy: corev1.DNSNone, dnsConfig: &corev1.PodDNSConfig{Nameservers: []string{"8.8.8.8", "1.1.1.1"}, Searches: []string{"x"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tmpl := &extv1beta1.SandboxTemplate{Spec: extv1beta1.SandboxTemplateSpec{NetworkPolicyManagement: c.mgmt, NetworkPolicy: c.policy}}
			spec := c.in.DeepCopy()
			ApplySandboxSecureDefaults(tmpl, spec)
			if !equality.Semantic.DeepEqual(spec.AutomountServiceAccountToken, c.automount) {
				t.Errorf("automount = %v, want %v", ptr.Deref(spec.AutomountServiceAccountToken, false), ptr.Deref(c.automount, false))
			}
			if spec.DNSPolicy != c.dnsPolicy {
				t.Errorf("dnsPolicy = %q, want %q", spec.DNSPolicy, c.dnsPolicy)
			}
			if !equality.Semantic.DeepEqual(spec.DNSConfig, c.dnsConfig) {
				t.Errorf("dnsConfig = %+v, want %+v", spec.DNSConfig, c.dnsConfig)
			}
			if spec.DNSConfig != nil && len(spec.DNSConfig.Nameservers) > 0 && spec.DNSConfig.Nameservers[0] != "8.8.8.8" {
				t.Errorf("8.8.8.8 must be the first resolver")
			}
		})
	}
}
