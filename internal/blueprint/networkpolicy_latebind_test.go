package blueprint

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	extv1beta1 "sigs.k8s.io/agent-sandbox/api/extensions/v1beta1"
	"sigs.k8s.io/agent-sandbox/internal/latebind"
)

// A template that allows claim env admits the controller to sandboxd's
// REST port only (where it delivers late-bound env); every other template
// keeps the published secure default, a single router rule.
func TestSecureDefaultAdmitsControllerForLateBinding(t *testing.T) {
	for policy, want := range map[extv1beta1.EnvVarsInjectionPolicy]int{
		"": 1, extv1beta1.EnvVarsInjectionPolicyDisallowed: 1,
		extv1beta1.EnvVarsInjectionPolicyAllowed: 2, extv1beta1.EnvVarsInjectionPolicyOverrides: 2,
	} {
		tm := &extv1beta1.SandboxTemplate{}
		tm.Name = "t"
		tm.Spec.EnvVarsInjectionPolicy = policy
		in := NetworkPolicySpec(tm).Ingress
		if len(in) != want {
			t.Fatalf("policy %q: %d ingress rules, want %d", policy, len(in), want)
		}
		if want == 1 {
			continue
		}
		r := in[1]
		if len(r.Ports) != 1 || *r.Ports[0].Protocol != corev1.ProtocolTCP || r.Ports[0].Port.IntValue() != latebind.DefaultPort {
			t.Errorf("policy %q: controller rule ports %+v, want TCP %d only", policy, r.Ports, latebind.DefaultPort)
		}
		if len(r.From) != 1 || r.From[0].PodSelector.MatchLabels["app"] != ControllerAppLabel ||
			r.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != RouterNamespace {
			t.Errorf("policy %q: controller rule peers %+v", policy, r.From)
		}
	}
	custom := &extv1beta1.SandboxTemplate{}
	custom.Spec.EnvVarsInjectionPolicy = extv1beta1.EnvVarsInjectionPolicyAllowed
	custom.Spec.NetworkPolicy = &extv1beta1.NetworkPolicySpec{}
	if in := NetworkPolicySpec(custom).Ingress; len(in) != 0 {
		t.Errorf("custom rules were widened: %+v", in)
	}
}
