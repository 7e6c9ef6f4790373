package blueprint

import (
	"fmt"
	"strings"
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
			ApplySecureDefaults(tmpl, spec)
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

func TestHardenedSecurityContext(t *testing.T) {
	runtimeDefault := &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}
	hardened := func() *corev1.SecurityContext {
		return &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
	withSC := func(sc *corev1.SecurityContext) corev1.PodSpec {
		return corev1.PodSpec{Containers: []corev1.Container{{Name: "main", SecurityContext: sc}}}
	}
	cases := []struct {
		name    string
		in      corev1.PodSpec
		pod     *corev1.PodSecurityContext
		wantSCs []*corev1.SecurityContext // per container, init containers first
	}{
		{name: "nothing set: everything hardened", in: withSC(nil),
			pod: &corev1.PodSecurityContext{SeccompProfile: runtimeDefault}, wantSCs: []*corev1.SecurityContext{hardened()}},
		{name: "pod seccomp profile of the template kept",
			in: corev1.PodSpec{
				SecurityContext: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000),
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}},
				Containers: []corev1.Container{{Name: "main"}}},
			pod: &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](1000),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeLocalhost, LocalhostProfile: ptr.To("p.json")}},
			wantSCs: []*corev1.SecurityContext{hardened()}},
		{name: "explicit allowPrivilegeEscalation true kept", in: withSC(&corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(true)}),
			pod:     &corev1.PodSecurityContext{SeccompProfile: runtimeDefault},
			wantSCs: []*corev1.SecurityContext{{AllowPrivilegeEscalation: ptr.To(true), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		{name: "template's own drop list kept", in: withSC(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}}}),
			pod:     &corev1.PodSecurityContext{SeccompProfile: runtimeDefault},
			wantSCs: []*corev1.SecurityContext{{AllowPrivilegeEscalation: ptr.To(false), Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"NET_RAW"}}}}},
		{name: "added capabilities kept next to drop ALL", in: withSC(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CHOWN"}}}),
			pod: &corev1.PodSecurityContext{SeccompProfile: runtimeDefault},
			wantSCs: []*corev1.SecurityContext{{AllowPrivilegeEscalation: ptr.To(false),
				Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CHOWN"}, Drop: []corev1.Capability{"ALL"}}}}},
		{name: "CAP_SYS_ADMIN added: no allowPrivilegeEscalation false (the apiserver refuses the pair)",
			in:      withSC(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CAP_SYS_ADMIN"}}}),
			pod:     &corev1.PodSecurityContext{SeccompProfile: runtimeDefault},
			wantSCs: []*corev1.SecurityContext{{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"CAP_SYS_ADMIN"}, Drop: []corev1.Capability{"ALL"}}}}},
		{name: "SYS_ADMIN added: same", in: withSC(&corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}}}),
			pod:     &corev1.PodSecurityContext{SeccompProfile: runtimeDefault},
			wantSCs: []*corev1.SecurityContext{{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}, Drop: []corev1.Capability{"ALL"}}}}},
		{name: "privileged container left alone", in: withSC(&corev1.SecurityContext{Privileged: ptr.To(true)}),
			pod: &corev1.PodSecurityContext{SeccompProfile: runtimeDefault}, wantSCs: []*corev1.SecurityContext{{Privileged: ptr.To(true)}}},
		{name: "other container fields kept", in: withSC(&corev1.SecurityContext{RunAsUser: ptr.To[int64](0), ReadOnlyRootFilesystem: ptr.To(true)}),
			pod: &corev1.PodSecurityContext{SeccompProfile: runtimeDefault},
			wantSCs: []*corev1.SecurityContext{{RunAsUser: ptr.To[int64](0), ReadOnlyRootFilesystem: ptr.To(true), AllowPrivilegeEscalation: ptr.To(false),
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		{name: "init containers hardened too",
			in:      corev1.PodSpec{InitContainers: []corev1.Container{{Name: "init"}}, Containers: []corev1.Container{{Name: "main"}}},
			pod:     &corev1.PodSecurityContext{SeccompProfile: runtimeDefault},
			wantSCs: []*corev1.SecurityContext{hardened(), hardened()}},
		{name: "Windows pod left alone (the Linux fields are forbidden there)",
			in:      corev1.PodSpec{OS: &corev1.PodOS{Name: corev1.Windows}, Containers: []corev1.Container{{Name: "main"}}},
			wantSCs: []*corev1.SecurityContext{nil}},
	}
	tmpl := &extv1beta1.SandboxTemplate{}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := c.in.DeepCopy()
			ApplySecureDefaults(tmpl, spec)
			if !equality.Semantic.DeepEqual(spec.SecurityContext, c.pod) {
				t.Errorf("pod securityContext = %+v, want %+v", spec.SecurityContext, c.pod)
			}
			var got []*corev1.SecurityContext
			for _, ctr := range append(append([]corev1.Container(nil), spec.InitContainers...), spec.Containers...) {
				got = append(got, ctr.SecurityContext)
			}
			if !equality.Semantic.DeepEqual(got, c.wantSCs) {
				t.Errorf("container securityContexts:\n got %s\nwant %s", scString(got), scString(c.wantSCs))
			}
			// Idempotent: a second pass (Matches renders again)
			// changes nothing.
			again := spec.DeepCopy()
			ApplySecureDefaults(tmpl, again)
			if !equality.Semantic.DeepEqual(again, spec) {
				t.Errorf("second application changed the spec")
			}
		})
	}
}

func scString(scs []*corev1.SecurityContext) string {
	var b strings.Builder
	for _, sc := range scs {
		fmt.Fprintf(&b, "%+v ", sc)
		if sc != nil && sc.Capabilities != nil {
			fmt.Fprintf(&b, "caps=%+v ", *sc.Capabilities)
		}
	}
	return b.String()
}
